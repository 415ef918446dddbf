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
                try await hook(pushes.increment())
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
            let number = request.path == "/v1/push" ? pushes.increment() : 0
            let response = try await next(request)
            guard number == lostPush else { return response }
            try await meanwhile()
            throw URLError(.networkConnectionLost)
        }
    }

    /// Refuses every push before it leaves, as a dead link does.
    static func noPushes(before base: any SyncTransport) -> InterceptingTransport {
        InterceptingTransport(base) { request, next in
            guard request.path != "/v1/push" else { throw URLError(.notConnectedToInternet) }
            return try await next(request)
        }
    }

    /// Runs `action` once, before the first pull request goes out.
    static func onFirstPull(_ base: any SyncTransport, _ action: @escaping @Sendable () async throws -> Void) -> InterceptingTransport {
        let pulled = LockIsolated(false)
        return InterceptingTransport(base) { request, next in
            if request.path.hasPrefix("/v1/pull"), pulled.isFirstTime() { try await action() }
            return try await next(request)
        }
    }

    /// Answers the first request to `path` with `status` and `headers` of its own (`status` nil:
    /// the real answer, with `headers` added), then lets every request through: a proxy or a
    /// server that asks for absurd waits.
    static func rewritingHeaders(
        _ base: any SyncTransport,
        path: String,
        status: Int?,
        headers: [String: String]
    ) -> InterceptingTransport {
        let answered = LockIsolated(false)
        return InterceptingTransport(base) { request, next in
            guard request.path.hasPrefix(path), answered.isFirstTime() else { return try await next(request) }
            if let status { return TransportResponse(status: status, headers: headers, body: Data()) }
            var response = try await next(request)
            response.headers.merge(headers) { $1 }
            return response
        }
    }
}

extension LockIsolated where Value == Int {
    /// Adds one and returns the new count: the doubles number the pushes they see this way.
    @discardableResult
    func increment() -> Int {
        withValue { count in
            count += 1
            return count
        }
    }
}

extension LockIsolated where Value == Bool {
    /// True the first time it is asked, false ever after.
    func isFirstTime() -> Bool {
        withValue { asked in
            defer { asked = true }
            return !asked
        }
    }
}

/// Passes requests through, except the first push: it reaches the server, which applies it,
/// and its answer is withheld until the task sending it is cancelled, as when the system
/// suspends an app with a request on the wire.
struct WithheldAnswerTransport: SyncTransport {
    private let seen = LockIsolated(0)
    private let appliedSignal: AsyncStream<Void>
    private let transport: InterceptingTransport

    init(_ base: any SyncTransport) {
        let (appliedSignal, applied) = AsyncStream.makeStream(of: Void.self)
        self.appliedSignal = appliedSignal
        let seen = self.seen
        transport = InterceptingTransport(base) { request, next in
            guard request.path == "/v1/push" else { return try await next(request) }
            let first = seen.increment() == 1
            let response = try await next(request)
            guard first else { return response }
            applied.yield()
            let (never, _) = AsyncStream.makeStream(of: Void.self)
            var iterator = never.makeAsyncIterator()
            _ = await iterator.next()  // returns nil once the task is cancelled
            throw CancellationError()
        }
    }

    /// Pushes sent so far.
    var pushes: Int { seen.value }

    /// Returns once the server has applied the push whose answer is withheld.
    func serverApplied() async {
        var iterator = appliedSignal.makeAsyncIterator()
        _ = await iterator.next()
    }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        try await transport.send(request)
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
                seen.increment()
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
