import Ferry
import Foundation

/// Wraps a transport and counts requests by path and responses by status, for an app's
/// diagnostics, `ferry demo` and tests.
public final class CountingTransport: SyncTransport, @unchecked Sendable {
    // @unchecked: `paths` and `statuses` are only touched under `lock`; `base` is immutable and Sendable.
    private let base: any SyncTransport
    private let lock = NSLock()
    private var paths: [String: Int] = [:]
    private var statuses: [Int: Int] = [:]

    /// Counts what passes through to `base`.
    public init(_ base: any SyncTransport) { self.base = base }

    /// Requests whose path (query included) starts with `prefix`, like `/v1/push`.
    public func count(_ prefix: String) -> Int { lock.withLock { paths.filter { $0.key.hasPrefix(prefix) }.values.reduce(0, +) } }

    /// Responses with this HTTP status, like 429.
    public func count(status: Int) -> Int { lock.withLock { statuses[status, default: 0] } }

    /// Counts the request by path, sends it through the wrapped transport, and counts the answer by status (an error
    /// thrown instead of an answer has none).
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        lock.withLock { paths[request.path, default: 0] += 1 }
        let response = try await base.send(request)
        lock.withLock { statuses[response.status, default: 0] += 1 }
        return response
    }

    /// Counts the stream's request by path and its answer by status, like `send(_:)`.
    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        lock.withLock { paths[request.path, default: 0] += 1 }
        let stream = try await base.openStream(request)
        lock.withLock { statuses[stream.status, default: 0] += 1 }
        return stream
    }
}
