import Foundation

/// Wraps a real transport and, by a seeded roll per request, resets the connection before
/// sending, loses the response after the server committed, or answers 429, 503 or 500
/// itself. For proving that an app's sync survives a hostile network: the server behind
/// it is real, so "exactly once" is checked against what the server holds.
public final class FaultInjectingTransport: SyncTransport, @unchecked Sendable {
    // @unchecked: `generator` and `injected` are only touched under `lock`; the rest is immutable.

    /// Percent of requests that meet each fault; the rest pass through untouched.
    public struct Faults: Sendable {
        public var reset = 10
        public var lostResponse = 12
        public var rateLimited = 5
        public var unavailable = 5
        public var internalError = 5

        public init() {}
    }

    /// The error a reset or lost response throws, as a dropped connection would.
    public struct ConnectionReset: Error, CustomStringConvertible {
        public var description: String { "connection reset (injected)" }
    }

    private let base: any SyncTransport
    private let faults: Faults
    private let lock = NSLock()
    private var generator: JitterGenerator
    private var injected: [String: Int] = [:]

    public init(_ base: any SyncTransport, seed: UInt64, faults: Faults = Faults()) {
        self.base = base
        self.faults = faults
        self.generator = JitterGenerator(seed: seed)
    }

    /// How many of each fault were injected so far: "reset", "lost response", "429", "503", "500".
    public var injectedFaults: [String: Int] { lock.withLock { injected } }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        let roll = lock.withLock { Int.random(in: 0..<100, using: &generator) }
        func note(_ fault: String) { lock.withLock { injected[fault, default: 0] += 1 } }
        var threshold = faults.reset
        if roll < threshold {
            note("reset")
            throw ConnectionReset()
        }
        threshold += faults.lostResponse
        if roll < threshold {
            _ = try await base.send(request)
            note("lost response")
            throw ConnectionReset()
        }
        for (share, status, code) in [(faults.rateLimited, 429, "rate_limited"), (faults.unavailable, 503, "unavailable"), (faults.internalError, 500, "internal")] {
            threshold += share
            if roll < threshold {
                note("\(status)")
                let headers = status == 500 ? [:] : ["Retry-After": "1"]
                return TransportResponse(status: status, headers: headers, body: Data(#"{"error":{"code":"\#(code)","message":"injected"}}"#.utf8))
            }
        }
        return try await base.send(request)
    }
}
