import Foundation

/// Hands every value sent to each subscriber's own stream, as it happens.
///
/// The owners (actors) send from their own isolation, so subscribers see values in the
/// order they were sent; a subscriber that stops iterating is dropped at once.
final class Broadcast<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `subscribers`, `finished` and `latest` are only read and written under
    // `lock`, and no continuation is finished while the lock is held (a finish runs
    // `onTermination`, which takes the lock). The one yield under the lock, a subscriber's
    // first value, is to a stream made a moment before, whose consumer cannot have ended it.
    private let lock = NSLock()
    private var subscribers: [UUID: AsyncStream<Element>.Continuation] = [:]
    /// Set by `finish()`: a later subscriber's stream ends after its first value.
    private var finished = false
    /// The latest value sent, for `subscribeFromLatest()`.
    private var latest: Element?

    /// The latest value sent; `nil` before the first.
    var latestValue: Element? { lock.withLock { latest } }

    /// Every value sent from now on, after `first` when given.
    func subscribe(
        startingWith first: Element? = nil,
        bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<Element> {
        subscribe(bufferingPolicy: bufferingPolicy) { first }
    }

    /// Every value sent from now on, after the latest one sent (if any): a subscriber that
    /// needs no isolation of its owner's to learn the current value.
    func subscribeFromLatest() -> AsyncStream<Element> {
        subscribe(bufferingPolicy: .unbounded) { self.latest }
    }

    /// Every value sent from now on, after the latest one sent, or `fallback` before the first.
    func subscribeFromLatest(orFirst fallback: Element) -> AsyncStream<Element> {
        subscribe(bufferingPolicy: .unbounded) { self.latest ?? fallback }
    }

    /// A new subscriber's stream, starting with `first()`, which is read and yielded under the
    /// lock, so a `send` at the same moment can neither overtake it nor be missed.
    private func subscribe(
        bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy,
        first: () -> Element?
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: bufferingPolicy)
        let id = UUID()
        continuation.onTermination = { [weak self] _ in self?.drop(id) }
        let open = lock.withLock {
            if let value = first() { continuation.yield(value) }
            if !finished { subscribers[id] = continuation }
            return !finished
        }
        if !open { continuation.finish() }
        return stream
    }

    func send(_ value: Element) {
        let receivers = lock.withLock {
            latest = value
            return Array(subscribers.values)
        }
        for subscriber in receivers { subscriber.yield(value) }
    }

    /// Ends every subscriber's stream, and those of subscribers to come.
    func finish() {
        let ended = lock.withLock {
            finished = true
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for subscriber in ended { subscriber.finish() }
    }

    private func drop(_ id: UUID) {
        lock.withLock { subscribers[id] = nil }
    }
}
