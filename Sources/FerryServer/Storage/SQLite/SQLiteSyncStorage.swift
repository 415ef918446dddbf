import FerryProtocol
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
                writer = try DatabasePool(path: path, configuration: configuration)
            } else {
                writer = try DatabaseQueue(configuration: configuration)
            }
            // A push is acknowledged once committed, and the client then forgets its entries:
            // the commit must survive a power cut. GRDB sets WAL's usual NORMAL on the writer,
            // with which a commit may roll back; FULL syncs the log at every commit.
            try writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            try Self.migrate(writer)
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

    /// Applies missing migrations. GRDB's migrator reads which are applied before it takes the
    /// write lock, so two processes opening a new file at once may both start the same one: the
    /// second fails on the first one's tables, and finds the migration applied on its next pass.
    private static func migrate(_ writer: any DatabaseWriter) throws {
        let migrator = Self.migrator
        while true {
            let before = try writer.read { db in try migrator.appliedIdentifiers(db) }
            do {
                return try migrator.migrate(writer)
            } catch {
                let after = try writer.read { db in try migrator.appliedIdentifiers(db) }
                // Another process made progress: try again. No progress means the error is ours.
                guard after.isStrictSuperset(of: before) else { throw error }
            }
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE server_meta (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL);
                    CREATE TABLE change_sequence (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
                    INSERT INTO change_sequence (id, value) VALUES (1, 0);
                    CREATE TABLE clients (
                        user_id TEXT NOT NULL,
                        client_id TEXT NOT NULL,
                        last_mutation_id INTEGER NOT NULL,
                        PRIMARY KEY (user_id, client_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE records (
                        user_id TEXT NOT NULL,
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        version INTEGER NOT NULL,
                        deleted INTEGER NOT NULL,
                        natural_key TEXT,
                        data BLOB,
                        seq INTEGER NOT NULL,
                        PRIMARY KEY (user_id, entity, entity_id)
                    ) WITHOUT ROWID;
                    CREATE UNIQUE INDEX records_live_natural_key
                        ON records (user_id, entity, natural_key) WHERE natural_key IS NOT NULL AND deleted = 0;
                    CREATE UNIQUE INDEX records_pull ON records (user_id, seq);
                    """
            )
            var secret = [UInt8](repeating: 0, count: 32)
            var generator = SystemRandomNumberGenerator()
            for index in secret.indices { secret[index] = generator.next() }
            try db.execute(
                sql: "INSERT INTO server_meta (key, value) VALUES ('cursor_secret', ?)",
                arguments: [Data(secret)]
            )
        }
        migrator.registerMigration("v2") { db in
            // Resent mutations are answered with their first result (`RecentResults`), and a
            // tombstone no longer holds a natural key (a revived record could clash with the
            // record that took the key since).
            try db.execute(
                sql: """
                    ALTER TABLE clients ADD COLUMN pushes INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE client_results (
                        user_id TEXT NOT NULL,
                        client_id TEXT NOT NULL,
                        slot INTEGER NOT NULL,
                        results BLOB NOT NULL,
                        PRIMARY KEY (user_id, client_id, slot)
                    );
                    UPDATE records SET natural_key = NULL WHERE deleted = 1 AND natural_key IS NOT NULL;
                    """
            )
        }
        migrator.registerMigration("v3") { db in
            // When each record's last change was made, for conflict policies (a delete's time
            // included), and which client's mutation wrote it at which position, so a pull can
            // leave a client's own answered writes out. Rows written before have none of it, and
            // are always sent; so is a row an older server wrote since (its seq moved on).
            try db.execute(
                sql: """
                    ALTER TABLE records ADD COLUMN changed_at INTEGER;
                    ALTER TABLE records ADD COLUMN written_by TEXT;
                    ALTER TABLE records ADD COLUMN written_mutation INTEGER;
                    ALTER TABLE records ADD COLUMN written_seq INTEGER;
                    """
            )
        }
        migrator.registerMigration("v4") { db in
            // What retention and restores need (`ChangeHead`, `purge(before:)`): when each record
            // state and client was last written (rows before this migration count from now), the
            // epoch of the process that wrote last and where that epoch began, and each user's
            // purge horizon. A partial index finds the tombstones to purge.
            let now = serverMilliseconds()
            try db.execute(
                sql: """
                    ALTER TABLE records ADD COLUMN written_at INTEGER NOT NULL DEFAULT \(now);
                    ALTER TABLE clients ADD COLUMN last_seen_at INTEGER NOT NULL DEFAULT \(now);
                    ALTER TABLE change_sequence ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE change_sequence ADD COLUMN epoch_base INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE user_horizons (user_id TEXT PRIMARY KEY NOT NULL, purged_through INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE INDEX records_tombstones ON records (written_at) WHERE deleted = 1;
                    CREATE INDEX clients_idle ON clients (last_seen_at);
                    """
            )
        }
        migrator.registerMigration("v5") { db in
            // Spaces (PROTOCOL.md, "Spaces"): a key per space never reused (AUTOINCREMENT), whose
            // records live under its partition (`SpacePartition`); a deleted space's row stays,
            // so a cursor naming its key can say which space was revoked. `last_position` is the
            // last position its pushes wrote or its purge reached: a pull looks it up once per
            // space to know whether anything moved.
            try db.execute(
                sql: """
                    CREATE TABLE spaces (
                        key INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL,
                        deleted INTEGER NOT NULL DEFAULT 0,
                        last_position INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE UNIQUE INDEX spaces_live_id ON spaces (id) WHERE deleted = 0;
                    CREATE TABLE space_members (
                        space_key INTEGER NOT NULL,
                        user_id TEXT NOT NULL,
                        role TEXT NOT NULL,
                        PRIMARY KEY (space_key, user_id)
                    ) WITHOUT ROWID;
                    CREATE UNIQUE INDEX space_members_user ON space_members (user_id, space_key);
                    CREATE TABLE member_versions (user_id TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v6") { db in
            // Attachments (PROTOCOL.md, "Attachments"): who uploaded which (an uploader may read
            // it), and which attachments each record references, by the record's partition (a
            // member of its space may read them).
            try db.execute(
                sql: """
                    CREATE TABLE attachment_uploads (
                        user_id TEXT NOT NULL,
                        digest TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        uploaded_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, digest)
                    ) WITHOUT ROWID;
                    CREATE INDEX attachment_uploads_digest ON attachment_uploads (digest);
                    CREATE TABLE attachment_refs (
                        partition TEXT NOT NULL,
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        digest TEXT NOT NULL,
                        PRIMARY KEY (partition, entity, entity_id, digest)
                    ) WITHOUT ROWID;
                    CREATE INDEX attachment_refs_digest ON attachment_refs (digest, partition);
                    """
            )
        }
        migrator.registerMigration("v7") { db in
            // Uploads in progress (`OpenUpload`): counted in their user's quota and number; the
            // media type an upload said, answered with the attachment.
            try db.execute(
                sql: """
                    CREATE TABLE open_uploads (
                        upload_id TEXT PRIMARY KEY NOT NULL,
                        user_id TEXT NOT NULL,
                        digest TEXT NOT NULL,
                        length INTEGER,
                        held INTEGER NOT NULL,
                        touched_at INTEGER NOT NULL,
                        content_type TEXT
                    ) WITHOUT ROWID;
                    CREATE INDEX open_uploads_user ON open_uploads (user_id);
                    ALTER TABLE attachment_uploads ADD COLUMN content_type TEXT;
                    """
            )
        }
        migrator.registerMigration("v8") { db in
            // A reference its record no longer makes is released (when, in milliseconds), and
            // stays readable until the janitor's sweep a day later (issue 50).
            try db.execute(
                sql: """
                    ALTER TABLE attachment_refs ADD COLUMN released_at INTEGER;
                    CREATE INDEX attachment_refs_released ON attachment_refs (released_at) WHERE released_at IS NOT NULL;
                    """
            )
            // A tombstone held its references until purged; now its deletion releases them.
            try db.execute(
                sql: """
                    UPDATE attachment_refs SET released_at = ? WHERE EXISTS (SELECT 1 FROM records r
                        WHERE r.user_id = attachment_refs.partition AND r.entity = attachment_refs.entity
                        AND r.entity_id = attachment_refs.entity_id AND r.deleted = 1)
                    """,
                arguments: [serverMilliseconds()]
            )
        }
        return migrator
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
