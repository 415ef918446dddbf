import FerryProtocol
import Foundation
import NIOCore
import Testing

@testable import FerryServer

/// The server's hand-written push answer (`PushResponse+Body.swift`), read back by the client's reader.
@Suite("Push answer bodies", .timeLimit(.minutes(1)))
struct PushResponseBodyTests {
    @Test(
        "push answers as the server writes them read back equal, every status and field included; a later status is one rejection, a malformed one is named"
    )
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
        // A later server's status is that one result's problem (PROTOCOL.md, "Versions"): a
        // rejection that names it, every other field kept; a status that is not text is still a
        // malformed answer.
        let later = try PushResponse.decode(
            from: Data(
                #"{"lastMutationID":1,"results":[{"id":1,"status":"done","entityID":"a","version":4,"current":{"version":4,"deleted":false}}]}"#.utf8
            )
        )
        #expect(later.results.map(\.status) == [.rejected])
        #expect(later.results.first?.code == PushResult.unrecognizedStatus)
        #expect(later.results.first?.error?.contains(#""done""#) == true)
        #expect(later.results.first?.entityID == "a" && later.results.first?.version == 4)
        #expect(later.results.first?.current == RecordState(version: 4, deleted: false, data: nil))
        #expect {
            try PushResponse.decode(from: Data(#"{"lastMutationID":1,"results":[{"id":1,"status":7}]}"#.utf8))
        } throws: { error in
            "\(error)" == #"results[0].status: expected one of "applied", "merged", "duplicate", "conflict", "rejected", got 7"#
        }
    }
}
