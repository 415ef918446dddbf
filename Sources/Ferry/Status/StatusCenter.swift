import Foundation

/// Holds the current ``SyncStatus`` and pushes every change to its observers.
actor StatusCenter {
    private(set) var status = SyncStatus()
    private let observers = Broadcast<SyncStatus>()
    private let memberships = Broadcast<MembershipChange>()
    private let refusals = Broadcast<Rejection>()
    /// The newest `FerryStore.commits` the counts in `status` reflect: counts read from
    /// an outbox older than that are dropped.
    private var countedAtCommit = -1
    /// Whether the counts were read from the outbox, not worked out (an upload's progress).
    private var countsAreExact = false

    /// Whether the counts are those the outbox holds after `commits` commits: an exact read
    /// need not count again.
    func countsAreExact(at commits: Int) -> Bool {
        countsAreExact && countedAtCommit == commits
    }

    /// Changes the status. Counts set here are estimates (the next exact read counts the
    /// outbox); `asOfCommit` says which commit they follow, so that older counts cannot
    /// overwrite them.
    func update(asOfCommit commits: Int? = nil, _ change: (inout SyncStatus) -> Void) {
        var next = status
        change(&next)
        if next.pending != status.pending || next.deadLettered != status.deadLettered {
            countsAreExact = false
            if let commits { countedAtCommit = max(countedAtCommit, commits) }
        }
        publish(next)
    }

    /// Applies counts read from the outbox after `commits` transactions had changed it, unless
    /// counts read later were applied first (concurrent reads finish in any order), and returns
    /// the status as it then is, in the same step: no other update can come in between.
    func updateCounts(asOfCommit commits: Int, _ change: (inout SyncStatus) -> Void) -> SyncStatus {
        guard commits >= countedAtCommit else { return status }
        countedAtCommit = commits
        countsAreExact = true
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
        memberships.finish()
        refusals.finish()
    }

    /// Every change the server refuses from now on.
    nonisolated func rejections() -> AsyncStream<Rejection> {
        refusals.subscribe()
    }

    /// The server refused a change, which is now a dead letter.
    nonisolated func rejected(_ rejection: Rejection) {
        refusals.send(rejection)
    }

    /// Every membership change from now on.
    nonisolated func membershipChanges() -> AsyncStream<MembershipChange> {
        memberships.subscribe()
    }

    /// Tells the membership observers, after the page that learned it committed.
    func membershipChanged(_ change: MembershipChange) {
        memberships.send(change)
    }

    private func publish(_ next: SyncStatus) {
        guard next.isNews(after: status) else { return }
        status = next
        observers.send(next)
    }
}
