import FerryProtocol

/// Capped exponential backoff with full jitter for transient failures.
public struct RetryPolicy: Sendable {
    /// The ceiling of the first retry's random delay; it doubles with each attempt. 500 ms by default.
    public var initialDelay: Duration
    /// The most a ceiling grows to; 60 s by default, a day at most.
    public var maximumDelay: Duration
    /// Attempts per request before the sync gives up (it resumes on the next sync).
    public var maximumAttempts: Int

    /// A policy; by default retries wait up to 0.5 s, 1 s, 2 s and so on (at most 60 s), over at most 8 attempts.
    public init(initialDelay: Duration = .milliseconds(500), maximumDelay: Duration = .seconds(60), maximumAttempts: Int = 8) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumAttempts = maximumAttempts
    }

    /// Delay before retry number `attempt` (1-based): uniform in [0, min(cap, initial * 2^(attempt-1))].
    func delay(forAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        // A day at most, and never below zero, whatever the fields say: nothing here may overflow.
        let day = Duration.seconds(86_400)
        let initial = min(max(initialDelay, .zero), day)
        let ceiling = max(.zero, min(maximumDelay, initial * (1 << min(max(attempt - 1, 0), 30)), day))
        let milliseconds = Int(ceiling.milliseconds)
        return .milliseconds(Int.random(in: 0...max(0, milliseconds), using: &generator))
    }
}

/// SplitMix64: a small generator for backoff jitter that tests can seed.
package struct JitterGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    package init(seed: UInt64 = UInt64.random(in: 0...UInt64.max)) {
        state = seed
    }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
