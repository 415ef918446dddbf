import Foundation
import GRDB

/// Calls its handler after each committed transaction that added entries to the outbox,
/// which is how local writes raise the scheduler's `localChange` trigger. Deletions and
/// updates of entries (the uploader's own work) and captured-off pulls raise nothing.
final class QueuedChangeObserver: TransactionObserver, @unchecked Sendable {
    // @unchecked: `queued` is only touched from GRDB's observer callbacks, which run one at a
    // time on the database's writer queue; `notified` only under `lock`; `handler` is
    // immutable and Sendable.
    private let handler: @Sendable () -> Void
    private var queued = false
    private let lock = NSLock()
    private var notified = 0

    /// Transactions of this process that queued changes so far: the outbox's highest id moves
    /// with them, and only with another process's writes otherwise (`OtherProcessWrites`).
    var queuedTransactions: Int { lock.withLock { notified } }

    init(handler: @escaping @Sendable () -> Void) {
        self.handler = handler
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        if case .insert(tableName: OutboxTable.name) = eventKind { return true }
        return false
    }

    func databaseDidChange(with event: DatabaseEvent) {
        queued = true
        stopObservingDatabaseChangesUntilNextTransaction()  // one row says it all: spare the rest of a batch a callback each
    }

    func databaseDidCommit(_ db: Database) {
        guard queued else { return }
        queued = false
        lock.withLock { notified += 1 }
        handler()
    }

    func databaseDidRollback(_ db: Database) {
        queued = false
    }
}

extension FerryStore {
    /// Calls `handler` after every transaction that queued a change, for as long as the
    /// returned observer is kept alive.
    func observeQueuedChanges(_ handler: @escaping @Sendable () -> Void) -> QueuedChangeObserver {
        let observer = QueuedChangeObserver(handler: handler)
        database.add(transactionObserver: observer, extent: .observerLifetime)
        return observer
    }
}
