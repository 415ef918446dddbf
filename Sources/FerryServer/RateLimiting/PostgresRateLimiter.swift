import Foundation
import Logging
import PostgresNIO

/// A per-user token bucket kept in PostgreSQL, so that every server process on the database
/// draws from the same quota: the same refill rule as `TokenBucketRateLimiter`, decided by
/// `ferry_take_token` under the bucket's row lock.
///
/// Time is the database's clock, which every process shares; a test passes `now` (seconds
/// since 1970) from its own clock instead.
public struct PostgresRateLimiter: RateLimiter {
    private let client: PostgresClient
    private let policy: RateLimitPolicy
    private let logger: Logger
    private let now: (@Sendable () -> Double)?

    init(client: PostgresClient, policy: RateLimitPolicy, logger: Logger, now: (@Sendable () -> Double)? = nil) {
        self.client = client
        self.policy = policy
        self.logger = logger
        self.now = now
    }

    /// The same limiter reading time from `now` instead of the database.
    public func withClock(_ now: @escaping @Sendable () -> Double) -> PostgresRateLimiter {
        PostgresRateLimiter(client: client, policy: policy, logger: logger, now: now)
    }

    public func acquire(for userID: String) async throws -> RateLimitDecision {
        var decision: (allowed: Bool, tokens: Double)?
        do {
            for try await row in try await client.query(
                "SELECT allowed, remaining FROM ferry_take_token(\(userID), \(Double(policy.requests)), \(policy.refillPerSecond), \(now?()))", logger: logger
            ).decode((Bool, Double).self) {
                decision = row
            }
        } catch let error as PSQLError where error.isTransient {
            throw StorageError.unavailable("rate limits in PostgreSQL: \(PostgresSyncStorage.explain(error))")
        }
        guard let (allowed, tokens) = decision else { throw StorageError.corrupt("ferry_take_token returned no row") }
        return RateLimitDecision(allowed: allowed, tokens: tokens, policy: policy)
    }
}
