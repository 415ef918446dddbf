import Ferry
import Foundation

/// Wraps a real transport and makes requests fail the way networks and servers do: a reset
/// before the request is sent, a response lost after the server committed, or a 429, 503 or
/// 500 answered in the server's place.
///
/// Faults come two ways: scripted with ``inject(_:intoNext:)`` for a test that needs one
/// exact fault ("the answer to the next push is lost"), and rolled per request from a seed for
/// a soak test of a hostile network. The server behind it is real, so "exactly once" is
/// checked against what the server holds.
public final class FaultInjectingTransport: SyncTransport, @unchecked Sendable {
    // @unchecked: `generator`, `scripted` and `injected` are only touched under `lock`; the rest is immutable.

    /// One way for a request to fail.
    public enum Fault: Sendable, Equatable, CustomStringConvertible {
        /// The connection drops before the request reaches the server.
        case reset
        /// The server receives and commits the request, and its answer is lost.
        case lostResponse
        /// The server's place is taken by an error answer with this status (429, 503, 500…),
        /// with `Retry-After: 1` unless the status is 500.
        case status(Int)

        /// The fault's key in ``FaultInjectingTransport/injectedFaults``: "reset", "lost response", or the status.
        public var description: String {
            switch self {
            case .reset: "reset"
            case .lostResponse: "lost response"
            case .status(let status): "\(status)"
            }
        }
    }

    /// Percent of requests that meet each fault when rolled; the rest pass through untouched.
    public struct Faults: Sendable {
        /// Percent of requests whose connection resets before they reach the server; 10 by default.
        public var reset = 10
        /// Percent of requests the server commits whose answer is then lost; 12 by default.
        public var lostResponse = 12
        /// Percent of requests answered 429 in the server's place; 5 by default.
        public var rateLimited = 5
        /// Percent of requests answered 503 in the server's place; 5 by default.
        public var unavailable = 5
        /// Percent of requests answered 500 in the server's place; 5 by default.
        public var internalError = 5

        /// The default mix: over a third of requests fail, each kind of fault among them.
        public init() {}

        /// No rolled faults: only scripted ones happen.
        public static var none: Faults {
            var faults = Faults()
            (faults.reset, faults.lostResponse, faults.rateLimited, faults.unavailable, faults.internalError) = (0, 0, 0, 0, 0)
            return faults
        }
    }

    /// The error a reset or lost response throws, as a dropped connection would.
    public struct ConnectionReset: Error, CustomStringConvertible {
        /// Says the reset was injected, so that a test's log tells it from a real one.
        public var description: String { "connection reset (injected)" }
    }

    private let base: any SyncTransport
    private let faults: Faults
    private let lock = NSLock()
    private var generator: JitterGenerator
    private var scripted: [(pathPrefix: String, fault: Fault)] = []
    private var injected: [String: Int] = [:]

    /// Wraps `base`. `seed` makes the rolled faults repeat from run to run; with `faults: .none`
    /// only scripted faults happen.
    public init(_ base: any SyncTransport, seed: UInt64 = 0, faults: Faults = Faults()) {
        self.base = base
        self.faults = faults
        self.generator = JitterGenerator(seed: seed)
    }

    /// Makes the next request whose path starts with `pathPrefix` (like `/v1/push`) meet
    /// `fault`. Scripted faults are used in the order they were given.
    public func inject(_ fault: Fault, intoNext pathPrefix: String) {
        lock.withLock { scripted.append((pathPrefix, fault)) }
    }

    /// How many of each fault were injected so far, by ``Fault/description``: "reset",
    /// "lost response", "429", "503", "500".
    public var injectedFaults: [String: Int] { lock.withLock { injected } }

    /// Sends `request` through the wrapped transport unless a scripted or rolled fault takes it: then throws
    /// ``FaultInjectingTransport/ConnectionReset`` (for a lost response, after the server answered), or returns the
    /// injected error answer.
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard let fault = nextFault(for: request.path) else { return try await base.send(request) }
        lock.withLock { injected[fault.description, default: 0] += 1 }
        switch fault {
        case .reset:
            throw ConnectionReset()
        case .lostResponse:
            _ = try await base.send(request)
            throw ConnectionReset()
        case .status(let status):
            let code =
                switch status {
                case 429: "rate_limited"
                case 503: "unavailable"
                default: "internal"
                }
            let headers = status == 500 ? [:] : ["Retry-After": "1"]
            return TransportResponse(status: status, headers: headers, body: Data(#"{"error":{"code":"\#(code)","message":"injected"}}"#.utf8))
        }
    }

    /// Opens the stream through the wrapped transport, or fails it with a connection reset when
    /// the schedule says so: the faults of a stream are its opening's (a stream cut midway is
    /// the server's or the network's, which the real server's tests cut).
    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        guard let fault = nextFault(for: request.path) else { return try await base.openStream(request) }
        lock.withLock { injected[fault.description, default: 0] += 1 }
        throw ConnectionReset()
    }

    /// A scripted fault for this path first; otherwise a roll of the seeded generator.
    private func nextFault(for path: String) -> Fault? {
        lock.withLock {
            if let index = scripted.firstIndex(where: { path.hasPrefix($0.pathPrefix) }) {
                return scripted.remove(at: index).fault
            }
            var roll = Int.random(in: 0..<100, using: &generator)
            for (share, fault) in [
                (faults.reset, Fault.reset), (faults.lostResponse, .lostResponse), (faults.rateLimited, .status(429)),
                (faults.unavailable, .status(503)), (faults.internalError, .status(500)),
            ] {
                if roll < share { return fault }
                roll -= share
            }
            return nil
        }
    }
}
