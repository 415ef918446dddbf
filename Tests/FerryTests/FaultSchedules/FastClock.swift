/// Time that runs a thousand times faster than the wall: a Retry-After of 2 s passes in 2 ms
/// and a backoff of 500 ms in half a millisecond, so a schedule meets hundreds of waits and
/// still ends quickly, while waits keep the order real time gives them.
struct FastClock: Clock {
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    static let speedUp = 1000
    private let start = ContinuousClock.now

    var now: Instant { Instant(offset: (ContinuousClock.now - start) * Self.speedUp) }
    var minimumResolution: Duration { .zero }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let remaining = now.duration(to: deadline)
        if remaining > .zero {
            try await Task.sleep(for: remaining / Self.speedUp)
        } else {
            try Task.checkCancellation()
        }
    }
}
