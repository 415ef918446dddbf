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
    /// The provider call in progress: every request that needs a token meanwhile waits for it.
    private var fetching: Task<String, any Error>?

    package init(provider: @escaping TokenProvider, now: @escaping @Sendable () -> Date = Date.init) {
        self.provider = provider
        self.now = now
    }

    /// A token to send: the cached one while it is good, else a new one from the provider.
    package func token() async throws -> String {
        if let cached, cached.renewAt.map({ now() < $0 }) ?? true { return cached.token }
        if let fetching { return try await fetching.value }
        let provider = self.provider
        let fetch = Task { try await provider() }
        fetching = fetch
        defer { fetching = nil }
        let token = try await fetch.value
        cached = (token, Self.expiry(of: token).map { $0.addingTimeInterval(-Self.renewalMargin) })
        return token
    }

    /// The server refused `token`: the next `token()` asks the provider, unless another request
    /// has already replaced it.
    package func refused(_ token: String) {
        if cached?.token == token { cached = nil }
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
