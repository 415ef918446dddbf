import Foundation

/// A clock whose time moves only when someone sleeps on it, and then at once to the deadline.
///
/// Shared by a client and a server's rate limiter, it lets a test run minutes of paced
/// traffic in milliseconds while both sides agree on the time.
public final class VirtualClock: Clock, @unchecked Sendable {
    // @unchecked: `current` is only read and written under `lock`.
    public struct Instant: InstantProtocol {
        public var offset: Duration
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let lock = NSLock()
    private var current = Instant(offset: .zero)

    public init() {}

    public var now: Instant { lock.withLock { current } }
    public var minimumResolution: Duration { .zero }

    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        try Task.checkCancellation()
        lock.withLock { if current < deadline { current = deadline } }
    }
}
