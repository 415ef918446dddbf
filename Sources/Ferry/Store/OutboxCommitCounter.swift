import Foundation
import GRDB

/// Counts the write transactions this process has committed to the store, at the moment they
/// commit (GRDB calls `databaseDidCommit` before the write returns to the app). A status read
/// that finds the count moved since it last counted reads the outbox again, so it counts a
/// write the moment the write has returned, and costs nothing while nothing was written.
///
/// It observes no row: any commit may have changed the outbox, and asking SQLite which rows
/// changed would cost every captured write a callback (capture was 15% slower with one).
final class OutboxCommitCounter: TransactionObserver, @unchecked Sendable {
    // @unchecked: `commits` is read and written under `lock` only.
    private let lock = NSLock()
    private var commits = 0

    /// Transactions committed so far.
    var count: Int { lock.withLock { commits } }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }

    func databaseDidChange(with event: DatabaseEvent) {}

    func databaseDidCommit(_ db: Database) {
        lock.withLock { commits += 1 }
    }

    func databaseDidRollback(_ db: Database) {}
}
