import FerryProtocol
import Foundation
import NIOCore
import Testing

@testable import FerryServer

/// The server's hand-written push answer (`PushResponse+Body.swift`), read back by the client's reader.
@Suite("Push answer bodies", .timeLimit(.minutes(1)))
struct PushResponseBodyTests {
    @Test("push answers as the server writes them read back equal, every status and field included; a bad status is named")
    func pushResponses() throws {
        let response = PushResponse(
            lastMutationID: 10,
            results: [
                PushResult(id: 5, status: .applied, entityID: "a", version: 1),
                PushResult(id: 6, status: .merged, entityID: "canonical", version: 3),
                PushResult(id: 7, status: .duplicate, entityID: nil, version: nil),
                PushResult(
                    id: 8,
                    status: .conflict,
                    entityID: "c",
                    version: 2,
                    current: RecordState(version: 2, deleted: false, data: ["k": .string("v\""), "weight": .number(8000.0)], naturalKey: "K")
                ),
                PushResult(id: 9, status: .rejected, entityID: nil, version: nil, error: "entity \"X\" does not match"),
                PushResult(id: 10, status: .rejected, entityID: nil, version: nil, error: "reused", code: PushResult.mutationIDReused),
            ]
        )
        let body = Data(buffer: try response.jsonBody())
        #expect(try PushResponse.decode(from: body) == response)
        #expect(
            try PushResponse.decode(from: body).results[3].current?.data?["weight"] == .number(8000.0),
            "a REAL's 8000.0 stays a number with a fraction, not the integer 8000"
        )
        #expect {
            try PushResponse.decode(from: Data(#"{"lastMutationID":1,"results":[{"id":1,"status":"done"}]}"#.utf8))
        } throws: { error in
            "\(error)" == #"results[0].status: expected one of "applied", "merged", "duplicate", "conflict", "rejected", got "done""#
        }
    }
}
