import Foundation
import Logging
import PostgresNIO

/// A per-user token bucket kept in PostgreSQL, so that every server process on the database
/// draws from the same quota: the same refill rule as ``TokenBucketRateLimiter``, decided by
/// `ferry_take_token` under the bucket's row lock.
///
/// Time is the database's clock, which every process shares; a test passes `now` (seconds
/// since 1970) from its own clock instead.
public struct PostgresRateLimiter: RateLimiter {
    private let storage: PostgresSyncStorage
    private let policy: RateLimitPolicy
    private let now: (@Sendable () -> Double)?

    init(storage: PostgresSyncStorage, policy: RateLimitPolicy, now: (@Sendable () -> Double)? = nil) {
        self.storage = storage
        self.policy = policy
        self.now = now
    }

    /// The same limiter reading time from `now` instead of the database.
    package func withClock(_ now: @escaping @Sendable () -> Double) -> PostgresRateLimiter {
        PostgresRateLimiter(storage: storage, policy: policy, now: now)
    }

    /// Takes one token from `userID`'s bucket in the database, in a statement of its own. Throws ``StorageError``
    /// when the database cannot be reached in time.
    public func acquire(for userID: String) async throws -> RateLimitDecision {
        let query: PostgresQuery = """
            SELECT allowed, remaining FROM ferry_take_token(\(userID), \(Double(policy.requests)), \(policy.refillPerSecond), \(now?()))
            """
        let decision = try await storage.withDatabase { [logger = storage.logger] db in
            var decision: (allowed: Bool, tokens: Double)?
            for try await row in try await db.query(query, logger: logger).decode((Bool, Double).self) { decision = row }
            return decision
        }
        guard let (allowed, tokens) = decision else { throw StorageError.corrupt("ferry_take_token returned no row") }
        return RateLimitDecision(allowed: allowed, tokens: tokens, policy: policy)
    }

    /// Takes `tokens` from `userID`'s bucket in the database (`ferry_charge_tokens`), down to minus the quota at most.
    public func charge(_ tokens: Int, to userID: String) async throws {
        guard tokens > 0 else { return }
        let query: PostgresQuery = """
            SELECT ferry_charge_tokens(\(userID), \(Double(policy.requests)), \(policy.refillPerSecond), \(now?()), \(Double(tokens)))
            """
        try await storage.withDatabase { [logger = storage.logger] db in _ = try await db.query(query, logger: logger).collect() }
    }
}
