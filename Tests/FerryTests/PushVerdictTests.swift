import FerryProtocol
import Foundation
import Testing

@testable import Ferry

/// What a push answer means for its batch, decided without a database or a network
/// (`PushVerdict`); the uploader suites check what the `Uploader` does with each.
@Suite("Push verdict")
struct PushVerdictTests {
    static func answer(_ status: Int, _ body: Data) -> TransportResponse {
        TransportResponse(status: status, headers: [:], body: body)
    }

    static func error(_ code: ErrorCode, _ message: String) throws -> Data {
        try JSONEncoder().encode(ErrorEnvelope(code: code, message: message))
    }

    @Test("a 200 with results is answered; one whose body is not a push response is malformed")
    func answered() throws {
        let push = PushResponse(lastMutationID: 3, results: [PushResult(id: 3, status: .applied, entityID: "n1", version: 1)])
        guard case .answered(let decoded) = PushVerdict(Self.answer(200, try JSONEncoder().encode(push)), mutations: 1) else {
            Issue.record("a push response was not read as answered")
            return
        }
        #expect(decoded == push)
        guard case .malformed = PushVerdict(Self.answer(200, Data("<html>".utf8)), mutations: 1) else {
            Issue.record("an HTML body under 200 was not malformed")
            return
        }
    }

    @Test("a 408 halves a batch of several, and leaves one mutation queued for the next run")
    func bodyTimeout() throws {
        let body = try Self.error(.requestTimeout, "body too slow")
        guard case .halveForSlowLink(let message) = PushVerdict(Self.answer(408, body), mutations: 2) else {
            Issue.record("a 408 of two mutations did not halve")
            return
        }
        #expect(message == "body too slow")
        guard case .waitForNextRun = PushVerdict(Self.answer(408, body), mutations: 1) else {
            Issue.record("a 408 of one mutation did not wait for the next run")
            return
        }
    }

    @Test("a 413, or a 400 in the protocol's words, refuses the batch whole; a stranger's 400 and a 503 fail the run")
    func refusals() throws {
        guard case .refusedWhole(let tooLarge) = PushVerdict(Self.answer(413, try Self.error(.batchTooLarge, "4 MiB")), mutations: 3) else {
            Issue.record("a 413 was not a refusal of the whole batch")
            return
        }
        #expect(tooLarge == "push answered 413: 4 MiB")
        guard case .refusedWhole(let bad) = PushVerdict(Self.answer(400, try Self.error(.badRequest, "ids must increase")), mutations: 1) else {
            Issue.record("the protocol's 400 was not a refusal of the whole batch")
            return
        }
        #expect(bad == "push answered 400: ids must increase")
        guard case .failed(let proxy) = PushVerdict(Self.answer(400, Data("Bad Request".utf8)), mutations: 1) else {
            Issue.record("a proxy's 400 refused the batch instead of failing the run")
            return
        }
        #expect(proxy == "push answered 400: HTTP 400")
        guard case .failed = PushVerdict(Self.answer(503, Data()), mutations: 1) else {
            Issue.record("a 503 did not fail the run")
            return
        }
    }
}
