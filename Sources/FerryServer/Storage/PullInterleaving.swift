import Dispatch
import NIOConcurrencyHelpers

/// A test's way into a pull between its read of the user's memberships and its reads of their
/// spaces' rows, to force what a busy server only sometimes does: a member removed and the
/// space written in between. A pull reads both in one snapshot (PROTOCOL.md, "Spaces"), so
/// nothing committed while `pause` runs may show in its page. Production never sets it.
package final class PullInterleaving: Sendable {
    private let pause = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)

    package init() {}

    /// Runs `body` in every pull that reads spaces one by one, after their memberships are read;
    /// `nil` stops. `body` may block: it runs on a thread of its own, never a Swift concurrency one.
    package func set(_ body: (@Sendable () -> Void)?) {
        pause.withLockedValue { $0 = body }
    }

    /// Called by a storage engine's pull on a thread that may block (SQLite's reader).
    func reached() {
        pause.withLockedValue { $0 }?()
    }

    /// Called by a storage engine's pull from Swift concurrency: the pause runs off its threads.
    func reachedAsync() async {
        guard let body = pause.withLockedValue({ $0 }) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                body()
                continuation.resume()
            }
        }
    }
}
