import FerryProtocol
import HTTPTypes
import Hummingbird

/// Decides whether a user may make one more request now.
///
/// One protocol so that a limiter shared between server processes (kept in
/// PostgreSQL) can replace the in-process one.
public protocol RateLimiter: Sendable {
    func acquire(for userID: String) async throws -> RateLimitDecision
}

/// The limiter's answer, with what the `RateLimit-*` headers must say.
public struct RateLimitDecision: Sendable, Equatable {
    public var allowed: Bool
    public var limit: Int
    public var remaining: Int
    /// Whole seconds until the quota is fully available again.
    public var resetSeconds: Int
    /// Whole seconds until the next request is allowed; 0 when allowed.
    public var retryAfterSeconds: Int

    public var headers: HTTPFields {
        var fields = HTTPFields()
        fields[HTTPField.Name(ProtocolHeaders.rateLimitLimit)!] = "\(limit)"
        fields[HTTPField.Name(ProtocolHeaders.rateLimitRemaining)!] = "\(remaining)"
        fields[HTTPField.Name(ProtocolHeaders.rateLimitReset)!] = "\(resetSeconds)"
        return fields
    }
}
