import FerryProtocol
import Foundation

/// Holds the signed-in user's token between requests, as auth clients do: the provider is
/// asked once, and its token is reused until shortly before the `exp` its JWT claims (a token
/// that is not a JWT, until the server refuses it). When the server answers 401, the token it
/// refused is dropped and the provider asked again, once, by however many requests met it.
package actor TokenCache {
    /// A token is asked for again when less than this is left before its `exp`, so that one
    /// never expires on its way to the server or in a queue behind a rate limit.
    package static let renewalMargin: TimeInterval = 30

    private let provider: TokenProvider
    private let now: @Sendable () -> Date
    private var cached: (token: String, renewAt: Date?)?
    /// The provider call in progress, shared by every request that needs a token meanwhile.
    private var fetching: Task<Void, Never>?
    /// Requests waiting for `fetching`; each can stop waiting when its task is cancelled.
    private var waiters: [UUID: CheckedContinuation<String, any Error>] = [:]
    private var stopped = false

    package init(provider: @escaping TokenProvider, now: @escaping @Sendable () -> Date = Date.init) {
        self.provider = provider
        self.now = now
    }

    /// A token to send: the cached one while it is good, else a new one from the provider.
    /// Cancelling the caller stops its wait at once, whatever the provider does.
    package func token() async throws -> String {
        if let cached, cached.renewAt.map({ now() < $0 }) ?? true { return cached.token }
        let id = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard !stopped, !Task.isCancelled else {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                waiters[id] = continuation
                if fetching == nil { fetch() }
            }
        } onCancel: {
            Task { await self.stopWaiting(id) }
        }
    }

    /// The server refused `token`: the next `token()` asks the provider, unless another request
    /// has already replaced it.
    package func refused(_ token: String) {
        if cached?.token == token { cached = nil }
    }

    /// The user signed out: the provider call in progress is cancelled and nobody waits for it.
    package func stop() {
        stopped = true
        fetching?.cancel()
        for waiter in waiters.values { waiter.resume(throwing: CancellationError()) }
        waiters = [:]
    }

    private func fetch() {
        let provider = self.provider
        fetching = Task {
            let result: Result<String, any Error>
            do { result = .success(try await provider()) } catch { result = .failure(error) }
            self.fetched(result)
        }
    }

    private func fetched(_ result: Result<String, any Error>) {
        fetching = nil
        if case .success(let token) = result, !stopped {
            cached = (token, Self.expiry(of: token).map { $0.addingTimeInterval(-Self.renewalMargin) })
        }
        let waiting = waiters
        waiters = [:]
        for waiter in waiting.values { waiter.resume(with: result) }
    }

    private func stopWaiting(_ id: UUID) {
        waiters.removeValue(forKey: id)?.resume(throwing: CancellationError())
    }

    /// The `exp` claim of a JWT; `nil` for anything else (an opaque token is kept until refused).
    static func expiry(of token: String) -> Date? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Data(base64URLEncoded: String(parts[1])),
            let claims = try? JSONDecoder().decode(ExpiryClaim.self, from: payload), let exp = claims.exp
        else { return nil }
        return Date(timeIntervalSince1970: exp)
    }

    private struct ExpiryClaim: Decodable {
        var exp: Double?
    }
}
