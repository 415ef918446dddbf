import Ferry

/// A repeatable random number generator for seeded schedules: the same seed, the same run.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var base: JitterGenerator

    /// A generator whose every number comes from `seed`.
    public init(seed: UInt64) {
        base = JitterGenerator(seed: seed)
    }

    /// The next number.
    public mutating func next() -> UInt64 { base.next() }
}
