import Ferry
import Foundation

/// The one transport double: every exchange goes through closures that may pass it to the real
/// transport (`next`), answer it themselves (a proxy's 413), fail it (a reset), wait (a gate), or
/// lose the answer after the server committed (`try await next(request)`, then throw). A test
/// states only what it changes; what it counts it keeps in a `LockIsolated` of its own.
public struct InterceptingTransport: SyncTransport {
    /// Passes a request on to the real transport.
    public typealias Next = @Sendable (TransportRequest) async throws -> TransportResponse
    /// Opens a stream on the real transport.
    public typealias NextStream = @Sendable (TransportRequest) async throws -> TransportStream

    let base: any SyncTransport
    let exchange: @Sendable (TransportRequest, Next) async throws -> TransportResponse
    let streamExchange: @Sendable (TransportRequest, NextStream) async throws -> TransportStream

    /// A transport in front of `base`: `send` handles each request, `stream` each stream opening
    /// (both pass through by default).
    public init(
        _ base: any SyncTransport,
        send: @escaping @Sendable (TransportRequest, Next) async throws -> TransportResponse = { try await $1($0) },
        stream: @escaping @Sendable (TransportRequest, NextStream) async throws -> TransportStream = { try await $1($0) }
    ) {
        self.base = base
        self.exchange = send
        self.streamExchange = stream
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        try await exchange(request) { try await base.send($0) }
    }

    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        try await streamExchange(request) { try await base.openStream($0) }
    }
}
