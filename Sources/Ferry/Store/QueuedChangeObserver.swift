import Foundation

/// A listener to the transactions that queue changes (`StoreCommits`), for as long as it is
/// kept: the session's, which raises `localChange`.
final class QueuedChangeObserver: Sendable {
    private let commits: StoreCommits
    private let id = UUID()

    fileprivate init(_ commits: StoreCommits, handler: @escaping @Sendable () -> Void) {
        self.commits = commits
        commits.listen(id, handler)
    }

    deinit { commits.stopListening(id) }

    /// Transactions of this process that queued changes so far (`OtherProcessWrites`).
    var queuedTransactions: Int { commits.queuedTransactions }
}

extension FerryStore {
    /// Calls `handler` after every transaction that queued a change, for as long as the
    /// returned observer is kept alive.
    func observeQueuedChanges(_ handler: @escaping @Sendable () -> Void) -> QueuedChangeObserver {
        QueuedChangeObserver(commits, handler: handler)
    }
}
