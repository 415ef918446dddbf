import FerryProtocol

/// A per-user token bucket in this process: the whole quota is available as a
/// burst and refills continuously at `requests / window`.
public actor TokenBucketRateLimiter<C: Clock>: RateLimiter where C.Duration == Duration {
    private struct Bucket {
        var tokens: Double
        var updated: C.Instant
    }

    private let policy: RateLimitPolicy
    private let clock: C
    private let refillPerSecond: Double
    /// Keyed by the user id's bytes: ids that differ only in normalization are different users.
    private var buckets: [ExactKey: Bucket] = [:]

    /// A limiter applying `policy` to each user, with time read from `clock`.
    public init(policy: RateLimitPolicy, clock: C) {
        self.policy = policy
        self.clock = clock
        self.refillPerSecond = policy.refillPerSecond
    }

    /// Refills `userID`'s bucket for the time passed since its last request, then takes one token if a whole one is left.
    public func acquire(for userID: String) -> RateLimitDecision {
        let now = clock.now
        let key = ExactKey(userID)
        var bucket = refilled(key, at: now)
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 }
        buckets[key] = bucket
        if buckets.count > 10_000 { forgetFullBuckets(at: now) }
        return RateLimitDecision(allowed: allowed, tokens: bucket.tokens, policy: policy)
    }

    /// Takes `tokens` from `userID`'s bucket after refilling it, down to minus the quota at most.
    public func charge(_ tokens: Int, to userID: String) {
        guard tokens > 0 else { return }
        let key = ExactKey(userID)
        var bucket = refilled(key, at: clock.now)
        bucket.tokens = max(-Double(policy.requests), bucket.tokens - Double(tokens))
        buckets[key] = bucket
    }

    /// `key`'s bucket refilled for the time passed since it was last touched, as of `now`; a
    /// user without one has the whole quota.
    private func refilled(_ key: ExactKey, at now: C.Instant) -> Bucket {
        let capacity = Double(policy.requests)
        var bucket = buckets[key] ?? Bucket(tokens: capacity, updated: now)
        bucket.tokens = min(capacity, bucket.tokens + bucket.updated.duration(to: now).seconds * refillPerSecond)
        bucket.updated = now
        return bucket
    }

    /// A bucket that has refilled completely is the same as no bucket: drop it to bound memory.
    private func forgetFullBuckets(at now: C.Instant) {
        let capacity = Double(policy.requests)
        buckets = buckets.filter { _, bucket in
            bucket.tokens + bucket.updated.duration(to: now).seconds * refillPerSecond < capacity
        }
    }
}

extension TokenBucketRateLimiter where C == ContinuousClock {
    /// A limiter applying `policy` to each user, on the continuous clock.
    public init(policy: RateLimitPolicy) {
        self.init(policy: policy, clock: ContinuousClock())
    }
}
