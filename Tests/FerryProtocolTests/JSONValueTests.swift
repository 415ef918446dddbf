import FerryProtocol
import Foundation
import Testing

@Suite("JSONValue", .timeLimit(.minutes(1)))
struct JSONValueTests {
    @Test("every JSON type decodes to its own case and encodes back unchanged")
    func roundTrip() throws {
        let text = #"{"a":[1,"y",2.5],"b":true,"d":1.5,"i":9007199254740991,"n":null,"o":{"k":false},"s":"x"}"#
        let value = try JSONDecoder().decode(JSONObject.self, from: Data(text.utf8))
        #expect(value["b"] == .bool(true))
        #expect(value["i"] == .integer(9_007_199_254_740_991))
        #expect(value["d"] == .number(1.5))
        #expect(value["n"] == .null)
        #expect(value["s"] == .string("x"))
        #expect(value["a"] == .array([.integer(1), .string("y"), .number(2.5)]))
        #expect(value["o"] == .object(["k": .bool(false)]))
        #expect(String(decoding: try ProtocolValidation.encode(value), as: UTF8.self) == text)
    }
}
