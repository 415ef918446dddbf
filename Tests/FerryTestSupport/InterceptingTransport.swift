import Ferry
import Foundation

/// A transport that passes every exchange to a real one, with a closure run first that may
/// throw (a fault) or wait (a gate): built from closures, so a test states only what it changes.
public struct InterceptingTransport: SyncTransport {
    let base: any SyncTransport
    let beforeSend: @Sendable (TransportRequest) async throws -> Void
    let beforeStream: @Sendable (TransportRequest) async throws -> Void
    let stream: @Sendable (TransportStream) -> TransportStream

    public init(
        _ base: any SyncTransport,
        beforeSend: @escaping @Sendable (TransportRequest) async throws -> Void = { _ in },
        beforeStream: @escaping @Sendable (TransportRequest) async throws -> Void = { _ in },
        stream: @escaping @Sendable (TransportStream) -> TransportStream = { $0 }
    ) {
        self.base = base
        self.beforeSend = beforeSend
        self.beforeStream = beforeStream
        self.stream = stream
    }

    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        try await beforeSend(request)
        return try await base.send(request)
    }

    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        try await beforeStream(request)
        return stream(try await base.openStream(request))
    }
}
