import Foundation
import GRDB

/// Counts the committed transactions of this process that changed the outbox, at the moment
/// they commit (GRDB calls `databaseDidCommit` before the write returns to the app). A status
/// read that finds the count moved since it last counted reads the outbox again, so it counts a
/// write the moment the write has returned, and costs nothing while the outbox is unchanged.
final class OutboxCommitCounter: TransactionObserver, @unchecked Sendable {
    // @unchecked: `changed` is only touched from GRDB's observer callbacks, which run one at a
    // time on the database's writer queue; `commits` is read and written under `lock` only.
    private let lock = NSLock()
    private var commits = 0
    private var changed = false

    /// Transactions that changed the outbox so far.
    var count: Int { lock.withLock { commits } }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        eventKind.tableName == "ferry_outbox"
    }

    func databaseDidChange(with event: DatabaseEvent) {
        changed = true
        stopObservingDatabaseChangesUntilNextTransaction()  // one row says it all: spare the rest of a batch a callback each
    }

    func databaseDidCommit(_ db: Database) {
        guard changed else { return }
        changed = false
        lock.withLock { commits += 1 }
    }

    func databaseDidRollback(_ db: Database) {
        changed = false
    }
}
