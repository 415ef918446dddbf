import GRDB

/// Notices changes that another process (the app's widget or extension, on the same store
/// file) captured into the outbox. GRDB's transaction observers see this process's commits
/// only, so the session looks at the outbox's highest id every `interval`: one indexed read,
/// nothing while nothing changed.
enum OtherProcessWrites {
    /// Calls `changed` after each interval in which the outbox's highest id moved while this
    /// process committed nothing (its own writes raise `localChange` by themselves), until cancelled.
    static func watch(
        _ store: FerryStore,
        every interval: Duration,
        clock: any Clock<Duration>,
        changed: @escaping @Sendable () async -> Void
    ) async {
        let highest = { try? await store.database.read { db in try Int64.fetchOne(db, sql: "SELECT max(id) FROM ferry_outbox") } }
        var commits = store.outboxCommits.count
        var last = await highest()
        while true {
            do { try await clock.sleep(for: interval) } catch { return }
            let ownCommits = store.outboxCommits.count  // read first: a write of ours meanwhile counts as ours
            guard let top = await highest() else { continue }
            if top != last, ownCommits == commits { await changed() }
            (last, commits) = (top, ownCommits)
        }
    }
}
