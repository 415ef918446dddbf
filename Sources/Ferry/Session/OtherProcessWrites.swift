import GRDB

/// Notices changes that another process (the app's widget or extension, on the same store
/// file) captured into the outbox. GRDB's transaction observers see this process's commits
/// only, so the session looks at the outbox's highest id every `interval`: one indexed read.
enum OtherProcessWrites {
    /// Calls `changed` after each interval in which the outbox's highest id moved while this
    /// process queued nothing (`own` counts what it queued, and its own writes raise
    /// `localChange` by themselves), until cancelled.
    static func watch(
        _ store: FerryStore,
        own: QueuedChangeObserver,
        every interval: Duration,
        clock: any Clock<Duration>,
        changed: @escaping @Sendable () async -> Void
    ) async {
        let highest = { try? await store.database.read(OutboxTable.newest) }
        var queued = own.queuedTransactions
        var last = await highest()
        while true {
            do { try await clock.sleep(for: interval) } catch { return }
            let ownQueued = own.queuedTransactions  // read first: a write of ours meanwhile at worst triggers once more
            guard let top = await highest() else { continue }
            if top != last, ownQueued == queued { await changed() }
            (last, queued) = (top, ownQueued)
        }
    }
}
