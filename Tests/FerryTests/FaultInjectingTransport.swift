import Ferry
import Foundation

/// Wraps the real transport and, by a seeded roll per request, resets the connection before
/// sending, loses the response after the server committed, or answers 429, 503 or 500 itself.
final class FaultInjectingTransport: SyncTransport, @unchecked Sendable {
    // @unchecked: `generator` and `injected` are only touched under `lock`.
    struct ConnectionReset: Error {}
    private let base: any SyncTransport
    private let lock = NSLock()
    private var generator: JitterGenerator
    private(set) var injected: [String: Int] = [:]

    init(_ base: any SyncTransport, seed: UInt64) {
        self.base = base
        self.generator = JitterGenerator(seed: seed)
    }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let roll = lock.withLock { Int.random(in: 0..<100, using: &generator) }
        func note(_ fault: String) { lock.withLock { injected[fault, default: 0] += 1 } }
        switch roll {
        case 0..<10:
            note("reset")
            throw ConnectionReset()
        case 10..<22:
            _ = try await base.send(request)
            note("lost response")
            throw ConnectionReset()
        case 22..<27:
            note("429")
            return TransportResponse(status: 429, headers: ["Retry-After": "1"], body: Data(#"{"error":{"code":"rate_limited","message":"injected"}}"#.utf8))
        case 27..<32:
            note("503")
            return TransportResponse(status: 503, headers: ["Retry-After": "1"], body: Data(#"{"error":{"code":"unavailable","message":"injected"}}"#.utf8))
        case 32..<37:
            note("500")
            return TransportResponse(status: 500, headers: [:], body: Data(#"{"error":{"code":"internal","message":"injected"}}"#.utf8))
        default:
            return try await base.send(request)
        }
    }
}
