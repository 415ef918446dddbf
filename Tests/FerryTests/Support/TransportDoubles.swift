import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation

/// The transport doubles of the client's tests, each an `InterceptingTransport` in front of a
/// real server: what it changes, and nothing else.
extension InterceptingTransport {
    /// A proxy that refuses request bodies over `limit` bytes with 413, as nginx's
    /// `client_max_body_size` does.
    static func bodyLimit(_ limit: Int, before base: any SyncTransport) -> InterceptingTransport {
        InterceptingTransport(base) { request, next in
            guard let body = request.body, body.count > limit else { return try await next(request) }
            let envelope = #"{"error":{"code":"batch_too_large","message":"the proxy takes bodies of at most \#(limit) bytes"}}"#
            return TransportResponse(status: 413, headers: [:], body: Data(envelope.utf8))
        }
    }

    /// A slow link: a push whose body is over `bytes` is answered 408 (its body would not arrive
    /// within the server's body timeout), as the server would.
    static func slowLink(passing bytes: Int, before base: any SyncTransport) -> InterceptingTransport {
        InterceptingTransport(base) { request, next in
            guard request.path.hasPrefix("/v1/push"), (request.body?.count ?? 0) > bytes else { return try await next(request) }
            let envelope = ErrorEnvelope(code: .requestTimeout, message: "the request body did not arrive within 30 s; send the whole body at once")
            return TransportResponse(status: 408, headers: [:], body: try JSONEncoder().encode(envelope))
        }
    }

    /// Calls `hook` with the count of pushes so far before each push goes out.
    static func hooked(_ base: any SyncTransport, hook: @escaping @Sendable (Int) async throws -> Void) -> InterceptingTransport {
        let pushes = LockIsolated(0)
        return InterceptingTransport(base) { request, next in
            if request.path == "/v1/push" {
                try await hook(
                    pushes.withValue { count in
                        count += 1
                        return count
                    }
                )
            }
            return try await next(request)
        }
    }

    /// Loses the answer to push number `lostPush` after the server committed it; `meanwhile`
    /// runs before the client hears anything (another device writing while the answer is lost).
    static func losingAnswer(
        _ base: any SyncTransport,
        losing lostPush: Int = 1,
        meanwhile: @escaping @Sendable () async throws -> Void
    ) -> InterceptingTransport {
        let pushes = LockIsolated(0)
        return InterceptingTransport(base) { request, next in
            let number =
                request.path == "/v1/push"
                ? pushes.withValue { count in
                    count += 1
                    return count
                } : 0
            let response = try await next(request)
            guard number == lostPush else { return response }
            try await meanwhile()
            throw URLError(.networkConnectionLost)
        }
    }
}

/// Holds every push until the test opens the gate (`opener`), or the task is cancelled.
struct GatedTransport: SyncTransport {
    let opener: AsyncStream<Void>.Continuation
    private let seen = LockIsolated(0)
    private let transport: InterceptingTransport

    init(_ base: any SyncTransport) {
        let (gate, opener) = AsyncStream.makeStream(of: Void.self)
        self.opener = opener
        let seen = self.seen
        transport = InterceptingTransport(base) { request, next in
            if request.path == "/v1/push" {
                seen.withValue { $0 += 1 }
                var iterator = gate.makeAsyncIterator()
                _ = await iterator.next()  // returns nil at once when the task is cancelled
                try Task.checkCancellation()
            }
            return try await next(request)
        }
    }

    /// Pushes that reached the gate.
    var pushes: Int { seen.value }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        try await transport.send(request)
    }
}
