import Foundation
import NIOConcurrencyHelpers

/// Signals from one process to its own followers: the SQLite storage's feed, where every
/// writer of the database is this process.
final class LocalChangeFeed: Sendable {
    private let followers = NIOLockedValueBox<[UUID: @Sendable ([ChangeSignal]) -> Void]>([:])

    /// Hands `signals` to every follower, at once.
    func announce(_ signals: [ChangeSignal]) {
        guard !signals.isEmpty else { return }
        for deliver in followers.withLockedValue({ Array($0.values) }) { deliver(signals) }
    }

    /// Calls `deliver` with every announcement until the caller is cancelled.
    func follow(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async {
        let id = UUID()
        followers.withLockedValue { $0[id] = deliver }
        defer { _ = followers.withLockedValue { $0.removeValue(forKey: id) } }
        // Suspends until cancelled; nothing else to do meanwhile.
        let (cancelled, done) = AsyncStream.makeStream(of: Void.self)
        await withTaskCancellationHandler {
            for await _ in cancelled {}
        } onCancel: {
            done.finish()
        }
    }
}
