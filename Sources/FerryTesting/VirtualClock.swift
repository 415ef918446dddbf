import Foundation

/// A clock whose time moves only when someone sleeps on it, and then at once to the deadline.
///
/// Shared by a client and a server's rate limiter, it lets a test run minutes of paced
/// traffic in milliseconds while both sides agree on the time.
public final class VirtualClock: Clock, @unchecked Sendable {
    // @unchecked: `current` is only read and written under `lock`.
    /// A point in virtual time: how far the clock has moved since it was created.
    public struct Instant: InstantProtocol {
        /// Time since the clock's start.
        public var offset: Duration
        /// This instant moved by `duration`.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        /// Whether `lhs` comes before `rhs`.
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let lock = NSLock()
    private var current = Instant(offset: .zero)

    /// A clock at offset zero.
    public init() {}

    /// The current virtual time; it moves only when something sleeps.
    public var now: Instant { lock.withLock { current } }
    /// Zero: virtual time has no granularity.
    public var minimumResolution: Duration { .zero }

    /// Moves the clock to `deadline` at once (never back) and returns without waiting. Throws `CancellationError` if
    /// the task is already cancelled.
    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        try Task.checkCancellation()
        lock.withLock { if current < deadline { current = deadline } }
    }
}
