import FerryProtocol
import FerrySQLite
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// The embedded storage engine: one SQLite file in WAL mode through GRDB.
///
/// Change order comes from a counter bumped inside each push transaction.
/// SQLite admits one writer at a time, across processes too, so a position is
/// only ever handed out after every smaller one has committed: a reader that
/// sees position N has seen everything before it, and pull cursors built on
/// these positions cannot skip a change that commits late.
public final class SQLiteSyncStorage: SyncStorage {
    /// Rows per multi-row statement: a whole batch, so each step of a push is one statement.
    /// Padded to 1,024 rows of 11 values that is 11,264 variables, well under SQLite's limit of 32,766.
    static let rowsPerStatement = ProtocolLimits.maxMutationsPerPush

    /// Internal, not private: tests read the connections' settings through it.
    let writer: any DatabaseWriter
    let cursors: CursorCodec
    /// Where a test pauses a pull between its memberships and its spaces' rows.
    package let interleaving = PullInterleaving()
    /// One push per user at a time reaches the writer: a user's burst of large pushes waits here,
    /// in memory, so another user's push waits behind at most one of them, not all.
    let pushes = UserLine()
    /// This process's epoch (`ChangeHead`): a database restored under it shows in the cursors.
    let epoch = newEpoch()
    /// What each commit changed, for the event streams.
    let changes = LocalChangeFeed()
    /// The writer connection's `data_version` when last read (`watchOtherProcesses`).
    private let dataVersion: NIOLockedValueBox<Int?>

    /// Opens (creating if needed) the database at `path`, or an in-memory database for `nil`.
    /// `statementObserver` sees the SQL of every statement executed, for tests and diagnostics.
    public init(path: String?, statementObserver: (@Sendable (String) -> Void)? = nil) throws {
        var configuration = Configuration()
        configuration.label = "ferry.server.storage"
        configuration.busyMode = .timeout(10)
        if let statementObserver {
            configuration.prepareDatabase { db in
                db.trace(options: .statement) { event in
                    if case .statement(let statement) = event { statementObserver(statement.sql) }
                }
            }
        }
        do {
            if let path {
                writer = try DatabasePool.openShared(path: path, configuration: configuration)
            } else {
                writer = try DatabaseQueue(configuration: configuration)
            }
            // A push is acknowledged once committed, and the client then forgets its entries:
            // the commit must survive a power cut. GRDB sets WAL's usual NORMAL on the writer,
            // with which a commit may roll back; FULL syncs the log at every commit.
            try writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            try SQLiteSchema.migrator.migrateShared(writer)
            let secret = try writer.read { db in
                try Data.fetchOne(db, sql: "SELECT value FROM server_meta WHERE key = 'cursor_secret'")
            }
            guard let secret else { throw StorageError.corrupt("server_meta has no cursor_secret") }
            cursors = CursorCodec(secret: secret)
            // From here on, another process's commit moves it (`watchOtherProcesses`).
            dataVersion = NIOLockedValueBox(try writer.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA data_version") })
        } catch let error as DatabaseError {
            throw StorageError.unavailable("cannot open SQLite database at \(path ?? ":memory:"): \(error.message ?? "\(error)")")
        }
    }

    /// Calls `deliver` with what each commit changed until cancelled (see ``SyncStorage/followChanges(_:)``).
    public func followChanges(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.changes.follow(deliver) }
            group.addTask { await self.watchOtherProcesses(deliver) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Another `ferry serve` on the same file commits where this process cannot see it: SQLite's
    /// `data_version` of the writer connection moves only with other connections' commits, and
    /// this process writes through that one connection. Every half second, one pragma; when it
    /// moved, every stream is told to pull (what changed is not known here).
    /// Read first when the storage opened, so a commit before the first look is seen too.
    private func watchOtherProcesses(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async {
        while true {
            do { try await Task.sleep(for: .milliseconds(500)) } catch { return }
            guard let version = try? await writer.writeWithoutTransaction({ db in try Int.fetchOne(db, sql: "PRAGMA data_version") }) else {
                continue
            }
            let last = dataVersion.withLockedValue { last in
                defer { last = version }
                return last
            }
            if last != version { deliver([.everything]) }
        }
    }

    /// Deletes, in one transaction, the tombstones written before `cutoff` (each user's purge
    /// horizon moved past them first) and the clients that have not pushed since, with their
    /// kept results.
    public func purge(before cutoff: Int64) async throws -> PurgeReport {
        try await mapErrors {
            try await writer.write { db in
                var report = PurgeReport()
                try db.execute(
                    sql: """
                        INSERT INTO user_horizons (user_id, purged_through)
                        SELECT user_id, max(seq) FROM records WHERE deleted = 1 AND written_at < ? GROUP BY user_id
                        ON CONFLICT (user_id) DO UPDATE SET purged_through = max(purged_through, excluded.purged_through)
                        """,
                    arguments: [cutoff]
                )
                report.users = db.changesCount
                try db.execute(
                    sql: """
                        UPDATE spaces SET last_position = max(last_position, h.purged_through)
                        FROM user_horizons h WHERE h.user_id = char(1) || spaces.key
                        """
                )
                try db.execute(
                    sql: """
                        DELETE FROM records WHERE deleted = 1 AND written_at < ?
                            AND seq <= (SELECT purged_through FROM user_horizons h WHERE h.user_id = records.user_id)
                        """,
                    arguments: [cutoff]
                )
                report.tombstones = db.changesCount
                // A purged tombstone's attachments are no longer its: without another reference
                // they go with the uploads that expire (`purgeAttachments`).
                try db.execute(
                    sql: """
                        DELETE FROM attachment_refs WHERE NOT EXISTS (SELECT 1 FROM records r
                            WHERE r.user_id = attachment_refs.partition AND r.entity = attachment_refs.entity
                            AND r.entity_id = attachment_refs.entity_id)
                        """
                )
                try db.execute(
                    sql: """
                        DELETE FROM client_results WHERE (user_id, client_id) IN
                            (SELECT user_id, client_id FROM clients WHERE last_seen_at < ?)
                        """,
                    arguments: [cutoff]
                )
                try db.execute(sql: "DELETE FROM clients WHERE last_seen_at < ?", arguments: [cutoff])
                report.clients = db.changesCount
                // Side effects delivered before the retention are forgotten.
                try db.execute(sql: "DELETE FROM side_effects WHERE delivered_at < ?", arguments: [cutoff])
                return report
            }
        }
    }

    /// A cursor standing before every change, as a device that pulled before anything was written
    /// holds: pulls from it bring tombstones too. For tests that look at every change.
    package func cursorBeforeEverything(userID: String) -> String {
        cursors.encode(PullCursor(position: 0), userID: userID)
    }

    /// Reads from the database; throws ``StorageError`` when it cannot.
    public func checkHealth() async throws {
        do {
            _ = try await writer.read { db in try Int.fetchOne(db, sql: "SELECT 1 FROM change_sequence") }
        } catch {
            throw StorageError.unavailable("\(error)")
        }
    }

    /// Waits for reads in progress, on a dispatch queue of its own: GRDB's `close()` blocks,
    /// and a blocked Swift concurrency thread may be the one those reads need.
    public func close() async throws {
        let writer = self.writer
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue(label: "ferry.storage.close").async {
                continuation.resume(with: Result { try writer.close() })
            }
        }
    }

    /// Turns SQLite failures a client should retry (busy, I/O, full disk, closed) into `StorageError.unavailable`.
    func mapErrors<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as DatabaseError {
            switch error.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_IOERR, .SQLITE_FULL, .SQLITE_CANTOPEN, .SQLITE_READONLY,
                .SQLITE_MISUSE:
                throw StorageError.unavailable(error.message ?? "\(error.resultCode)")
            default:
                throw error
            }
        }
    }
}

extension Array {
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
