import Foundation

/// Holds the current `SyncStatus` and pushes every change to its observers.
actor StatusCenter {
    private(set) var status = SyncStatus()
    private let observers = Broadcast<SyncStatus>()
    /// `FerryStore.outboxCommits` when the counts in `status` were read from the outbox; -1
    /// when they were worked out otherwise (an upload's progress), so an exact read counts again.
    private(set) var countedAtCommit = -1

    /// Changes the status. Counts set here are estimates: the next exact read counts the outbox.
    func update(_ change: (inout SyncStatus) -> Void) {
        var next = status
        change(&next)
        if next.pending != status.pending || next.deadLettered != status.deadLettered { countedAtCommit = -1 }
        publish(next)
    }

    /// Applies counts read from the outbox after `commits` transactions had changed it, unless
    /// counts read later were applied first (concurrent reads finish in any order), and returns
    /// the status as it then is, in the same step: no other update can come in between.
    func updateCounts(asOfCommit commits: Int, _ change: (inout SyncStatus) -> Void) -> SyncStatus {
        guard commits >= countedAtCommit else { return status }
        countedAtCommit = commits
        var next = status
        change(&next)
        publish(next)
        return status
    }

    /// A stream that starts with the current status and then yields every change.
    func stream() -> AsyncStream<SyncStatus> {
        observers.subscribe(startingWith: status)
    }

    func finishAll() {
        observers.finish()
    }

    private func publish(_ next: SyncStatus) {
        guard next != status else { return }
        status = next
        observers.send(next)
    }
}
