import FerryProtocol
import Foundation
import Testing

@Suite("JSONReader", .timeLimit(.minutes(1)))
struct JSONReaderTests {
    @Test("valid documents read the same as through JSONDecoder, and write back as stored")
    func agreesWithJSONDecoder() throws {
        let documents = [
            #"{"a":[1,"y",2.5],"b":true,"d":1.5,"i":9007199254740991,"n":null,"o":{"k":false},"s":"x"}"#,
            #" { "spaced" : [ 1 , 2 ] , "empty" : { } , "none" : [ ] } "#,
            #"{"escapes":"\"\\\/\b\f\n\r\t\u0001\u00e9\u20ac\ud83d\ude00","raw":"é€😀"}"#,
            #"{"numbers":[0,-0,-12,1E-2,-0.5,1.2345678901234567e29,9223372036854775807,-9223372036854775808]}"#,
            #"{"nested":[[[{"deep":[{}]}]]]}"#,
        ]
        for text in documents {
            let read = try JSONReader.parse(Data(text.utf8))
            let decoded = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            #expect(read == decoded, "\(text)")
            guard case .object(let object) = read else {
                Issue.record("not an object: \(text)")
                continue
            }
            // What the server stores reads back to the same value.
            #expect(try JSONReader.parse(ProtocolValidation.encode(object)) == read, "\(text)")
        }
    }

    @Test("integers that fit in 64 bits stay integers, larger ones are refused rather than rounded; other numbers are doubles")
    func numbers() throws {
        #expect(try JSONReader.parse(Data("9223372036854775807".utf8)) == .integer(.max))
        #expect(try JSONReader.parse(Data("-9223372036854775808".utf8)) == .integer(.min))
        for text in ["9223372036854775808", "-9223372036854775809", "[1, 123456789012345678901234]"] {
            #expect {
                try JSONReader.parse(Data(text.utf8))
            } throws: { error in
                "\(error)".contains("does not fit in 64 bits")
            }
        }
        #expect(try JSONReader.parse(Data("2.0".utf8)) == .number(2))
        #expect(try JSONReader.parse(Data("1e3".utf8)) == .number(1000))  // JSONDecoder would make it an integer
        #expect(try JSONReader.parse(Data("-7".utf8)) == .integer(-7))
    }

    @Test("what RFC 8259 does not allow is refused, saying what and where")
    func refusals() {
        let cases: [(String, String)] = [
            ("", "end of input"),
            ("{\"a\":1,}", "quoted key"),
            ("[1,]", "unexpected character ']'"),
            ("{\"a\" 1}", "':'"),
            ("[1 2]", "',' or ']'"),
            ("01", "leading zero"),
            ("1.", "after '.'"),
            ("-", "digit"),
            ("1e", "exponent"),
            ("1e999", "out of range"),
            ("NaN", "unexpected character 'N'"),
            ("tru", "unexpected character 't'"),
            ("\"a\u{01}b\"", "control character"),
            ("\"\\x\"", "invalid escape"),
            ("\"\\u12G4\"", "hex digit"),
            ("\"\\ud83d\"", "surrogate"),
            ("\"\\ude00\"", "surrogate"),
            ("\"open", "unterminated"),
            ("{} {}", "after the JSON value"),
            ("'single'", "unexpected character"),
            (String(repeating: "[", count: 600) + String(repeating: "]", count: 600), "nesting"),
        ]
        for (text, reason) in cases {
            #expect {
                try JSONReader.parse(Data(text.utf8))
            } throws: { error in
                "\(error)".contains(reason) && "\(error)".contains("at byte")
            }
        }
        #expect(throws: JSONReader.Failure.self) { try JSONReader.parse([0x22, 0xF0, 0x9F, 0x98, 0x22]) }  // a cut 4-byte sequence
        #expect(throws: JSONReader.Failure.self) { try JSONReader.parse([0x22, 0xC0, 0xAF, 0x22]) }  // overlong encoding
    }

    @Test("push bodies: unknown fields ignored, nulls for optional fields, each problem named by its path")
    func pushBodies() throws {
        let body =
            #"{"clientID":"c","extra":[1],"mutations":[{"id":1,"entity":"e","entityID":"x","op":"upsert","data":{"k":1},"naturalKey":null,"baseVersion":null,"note":"?"}]}"#
        let request = try PushRequest.decode(from: Data(body.utf8))
        #expect(request == PushRequest(clientID: "c", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: ["k": .integer(1)])]))
        let cases: [(String, String)] = [
            (
                #"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":"x","op":"upsert","data":null,"baseVersion":"2"}]}"#,
                #"mutations[0].baseVersion: expected a whole number, got "2""#
            ),
            (
                #"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":null,"op":"delete"}]}"#,
                "mutations[0].entityID: expected a string, got null"
            ),
            (#"{"clientID":"c","mutations":[1]}"#, "mutations[0]: expected a JSON object, got 1"),
            (#"{"mutations":[]}"#, "clientID: is required"),
            (
                #"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":"x","op":"Upsert"}]}"#,
                #"mutations[0].op: expected one of "upsert", "delete", got "Upsert""#
            ),
            (
                #"{"clientID":"c","mutations":[{"id":2.5,"entity":"e","entityID":"x","op":"delete"}]}"#,
                "mutations[0].id: expected a whole number, got 2.5"
            ),
        ]
        for (text, message) in cases {
            #expect(throws: ProtocolViolation.badRequest(message)) { try PushRequest.decode(from: Data(text.utf8)) }
        }
    }
}
