import Foundation
import GRDB

/// The one observer of a store's commits in this process (installed when the store opens; GRDB
/// calls `databaseDidCommit` before the write returns to the app):
///
/// - it counts every write transaction, so a status read that finds the count moved since it
///   last counted reads the outbox again, and costs nothing while nothing was written;
/// - while someone asks (``FerryStore/observeQueuedChanges(_:)``: a signed-in session), it tells
///   them of each transaction that queued a change, which is how local writes raise the
///   scheduler's `localChange`. Deletions and updates of entries (the uploader's own work) and
///   captured-off pulls tell nothing.
///
/// It observes rows only while someone asks, and then only the first outbox insert of a
/// transaction: asking SQLite which rows changed costs every captured write a callback
/// (capture was 15% slower with one).
final class StoreCommits: TransactionObserver, @unchecked Sendable {
    // @unchecked: `queued` is only touched from GRDB's observer callbacks, which run one at a
    // time on the database's writer queue; everything else only under `lock`.
    private let lock = NSLock()
    private var commits = 0
    private var queuedCommits = 0
    private var listeners: [UUID: @Sendable () -> Void] = [:]
    private var queued = false

    /// Transactions committed so far.
    var count: Int { lock.withLock { commits } }

    /// Transactions that queued changes while someone asked: the outbox's highest id moves
    /// with them, and only with another process's writes otherwise (`OtherProcessWrites`).
    var queuedTransactions: Int { lock.withLock { queuedCommits } }

    /// Calls `handler` after every transaction that queues a change, until `stopListening(_:)`.
    func listen(_ id: UUID, _ handler: @escaping @Sendable () -> Void) {
        lock.withLock { listeners[id] = handler }
    }

    func stopListening(_ id: UUID) {
        lock.withLock { _ = listeners.removeValue(forKey: id) }
    }

    // GRDB asks at each statement: with nobody listening, no row is observed.
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        guard case .insert(tableName: OutboxTable.name) = eventKind else { return false }
        return lock.withLock { !listeners.isEmpty }
    }

    func databaseDidChange(with event: DatabaseEvent) {
        queued = true
        stopObservingDatabaseChangesUntilNextTransaction()  // one row says it all: spare the rest of a batch a callback each
    }

    func databaseDidCommit(_ db: Database) {
        let queuedHere = queued
        queued = false
        let told = lock.withLock {
            commits += 1
            guard queuedHere else { return [@Sendable () -> Void]() }
            queuedCommits += 1
            return Array(listeners.values)
        }
        for handler in told { handler() }
    }

    func databaseDidRollback(_ db: Database) {
        queued = false
    }
}
