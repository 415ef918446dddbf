import FerryProtocol
import HTTPTypes
import Hummingbird

/// Decides whether a user may make one more request now.
///
/// One protocol so that a limiter shared between server processes (kept in
/// PostgreSQL) can replace the in-process one.
public protocol RateLimiter: Sendable {
    /// Charges one request to `userID` and says whether it may go ahead, with the headers to send.
    func acquire(for userID: String) async throws -> RateLimitDecision

    /// Charges `tokens` more to `userID` for what a request cost beyond its one token (its bytes,
    /// `RateLimitPolicy/extraCost(bytes:)`). The bucket may go into debt, down to minus one
    /// window's quota: the user's next requests wait until it has refilled past one token.
    func charge(_ tokens: Int, to userID: String) async throws
}

/// The limiter's answer, with what the `RateLimit-*` headers must say.
public struct RateLimitDecision: Sendable, Equatable {
    /// Whether the request may go ahead; if not, it is answered 429.
    public var allowed: Bool
    /// The quota per window: `RateLimit-Limit`.
    public var limit: Int
    /// Whole requests left after this one: `RateLimit-Remaining`.
    public var remaining: Int
    /// Whole seconds until the quota is fully available again.
    public var resetSeconds: Int
    /// Whole seconds until the next request is allowed; 0 when allowed.
    public var retryAfterSeconds: Int

    init(allowed: Bool, limit: Int, remaining: Int, resetSeconds: Int, retryAfterSeconds: Int) {
        self.allowed = allowed
        self.limit = limit
        self.remaining = remaining
        self.resetSeconds = resetSeconds
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// The decision of a token bucket for `policy` that holds `tokens` after this request.
    init(allowed: Bool, tokens: Double, policy: RateLimitPolicy) {
        let capacity = Double(policy.requests)
        let refillPerSecond = policy.refillPerSecond
        self.init(
            allowed: allowed,
            limit: policy.requests,
            remaining: Self.whole(tokens.rounded(.down), atMost: capacity),
            resetSeconds: Self.whole(((capacity - tokens) / refillPerSecond).rounded(.up), atMost: policy.window.seconds),
            retryAfterSeconds: allowed ? 0 : max(1, Self.whole(((1 - tokens) / refillPerSecond).rounded(.up), atMost: policy.window.seconds))
        )
    }

    /// `value` as a header's whole number, within 0...`most` (a bucket read from a database
    /// another process wrote may hold anything; a header must never trap the server).
    private static func whole(_ value: Double, atMost most: Double) -> Int {
        guard value.isFinite else { return value > 0 ? Int(most.rounded(.up)) : 0 }
        return Int(min(max(value, 0), most.rounded(.up)))
    }

    /// The `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` fields of this decision; `Retry-After` is
    /// added by whoever answers 429.
    public var headers: HTTPFields {
        var fields = HTTPFields()
        fields[HTTPField.Name(ProtocolHeaders.rateLimitLimit)!] = "\(limit)"
        fields[HTTPField.Name(ProtocolHeaders.rateLimitRemaining)!] = "\(remaining)"
        fields[HTTPField.Name(ProtocolHeaders.rateLimitReset)!] = "\(resetSeconds)"
        return fields
    }
}
