import FerryProtocol
import Foundation
import GRDB

/// One user's local database: the app's synced tables plus Ferry's outbox,
/// record versions, sync position and journal, in one SQLite file (WAL).
///
/// The app writes through `database` as usual; triggers installed here
/// capture each change of a synced table into the outbox in the same
/// transaction, so a write and its outbox entry commit or vanish together.
public final class FerryStore: Sendable {
    /// The app's handle on its data. Writes to synced tables are captured automatically.
    public let database: DatabasePool
    /// This installation's client id. It changes only when the store finds that another store
    /// holds it too (a copy on another device, or a backup restored here): the server then
    /// knows ids this store never sent, and the store takes a new one (`Outbox.apply`).
    public var clientID: String { identity.clientID }
    /// The client id as this process last read or changed it.
    let identity: ClientIdentity
    /// The synced tables, each with its change capture installed.
    public let tables: [SyncedTable]
    /// The store's file.
    public let path: String
    /// Moves with every committed transaction of this process that changed the outbox.
    let outboxCommits = OutboxCommitCounter()

    /// Opens or creates the store at `path`.
    ///
    /// The app's migrations (`schema`) run with change capture off: the capture triggers come
    /// down before the first pending migration and go up again, matching the tables' new
    /// columns, after the last. A migration may therefore drop or rename columns of a synced
    /// table, and its own writes are not uploaded; to upload rows a migration changed, it
    /// calls ``FerryStore/queueUpload(of:where:arguments:in:)``.
    ///
    /// - Parameters:
    ///   - path: the store's file, created if it does not exist; its folder must exist.
    ///   - schema: the app's own migrations, run before the synced tables are checked.
    ///   - tables: the tables to sync; each must exist with a TEXT primary key column.
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store (nothing in
    ///   it is changed), ``FerryError/invalidTable(_:)`` for a table that does not fit, and the
    ///   app's migrations' own errors.
    public init(path: String, schema: DatabaseMigrator? = nil, tables: [SyncedTable]) throws {
        var configuration = Configuration()
        configuration.label = "ferry.store"
        configuration.busyMode = .timeout(10)
        do {
            if FileManager.default.fileExists(atPath: path) {
                // Looked at read-only first: opening a pool writes to the file (GRDB makes
                // sure the write-ahead log is not empty), and a file that is not ours stays as it is.
                var readOnly = Configuration()
                readOnly.readonly = true
                // Another process (an app's extension) may be opening or migrating it.
                readOnly.busyMode = .timeout(10)
                let probe = try DatabaseQueue(path: path, configuration: readOnly)
                try probe.read { db in try Self.checkReadable(db, path: path) }
                try probe.close()
            }
            database = try DatabasePool(path: path, configuration: configuration)
            try Self.migrate(database)
        } catch let error as DatabaseError {
            throw FerryError.unreadableStore("\(path): \(error.message ?? "\(error.resultCode)"); nothing in it was changed", underlying: error)
        }
        self.tables = tables
        self.path = path
        if let schema, try !database.read(schema.hasCompletedMigrations) {
            try database.write(ChangeCapture.uninstallAll)
            try schema.migrate(database)
        }
        identity = ClientIdentity(
            try database.write { db in
                guard let clientID = try StoreMeta.clientID(db) else {
                    throw FerryError.unreadableStore("\(path): ferry_meta holds no client id; the file is damaged")
                }
                for table in tables {
                    try ChangeCapture.install(for: table, in: db)
                    try ExtraFields.fold(into: table, db: db)
                }
                return clientID
            }
        )
        database.add(transactionObserver: outboxCommits)
    }

    /// Applies Ferry's missing migrations. GRDB's migrator reads which are applied before it
    /// takes the write lock, so two processes opening an older store at once (an app and its
    /// extension) may both start the same one: the second fails on what the first created, and
    /// finds the migration applied on its next pass.
    private static func migrate(_ database: DatabasePool) throws {
        while true {
            let before = try database.read { db in try migrator.appliedIdentifiers(db) }
            do {
                return try migrator.migrate(database)
            } catch {
                let after = try database.read { db in try migrator.appliedIdentifiers(db) }
                // Another process made progress: try again. No progress means the error is ours.
                guard after.isStrictSuperset(of: before) else { throw error }
            }
        }
    }

    /// Refuses, before anything is written, a file whose migrations say it is a Ferry store
    /// but that lacks what Ferry keeps in it.
    private static func checkReadable(_ db: Database, path: String) throws {
        guard try db.tableExists("grdb_migrations"),
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM grdb_migrations WHERE identifier = 'ferry-v1')") == true
        else { return }
        guard try db.tableExists("ferry_meta"), try db.tableExists("ferry_outbox"),
            try String.fetchOne(db, sql: "SELECT client_id FROM ferry_meta") != nil
        else {
            throw FerryError.unreadableStore("\(path): Ferry's tables are missing or empty; the file is damaged, nothing in it was changed")
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("ferry-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE ferry_meta (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        client_id TEXT NOT NULL,
                        capturing INTEGER NOT NULL,
                        cursor TEXT,
                        last_synced_at REAL
                    );
                    CREATE TABLE ferry_outbox (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        op TEXT NOT NULL,
                        data TEXT,
                        natural_key TEXT,
                        state INTEGER NOT NULL DEFAULT 0,
                        error TEXT
                    );
                    CREATE INDEX ferry_outbox_by_state ON ferry_outbox (state, id);
                    CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity, entity_id);
                    CREATE TABLE ferry_versions (
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        version INTEGER NOT NULL,
                        PRIMARY KEY (entity, entity_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE ferry_journal (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at REAL NOT NULL,
                        event TEXT NOT NULL
                    );
                    """
            )
            try db.execute(sql: "INSERT INTO ferry_meta (id, client_id, capturing) VALUES (1, ?, 1)", arguments: [ClientIdentity.newClientID()])
        }
        migrator.registerMigration("ferry-v2") { db in
            // Every captured write paid for this index, to spare `nextBatch` a walk in id
            // order past in-flight and dead-lettered entries (one batch, plus the few the
            // server refused): a poor trade. Without it capture costs one B-tree write less.
            try db.execute(sql: "DROP INDEX ferry_outbox_by_state")
        }
        migrator.registerMigration("ferry-v3") { db in
            // Capture wrote three more B-tree entries than the change itself: the
            // `(entity, entity_id)` index (re-keying and pulls now find queued records by a
            // scan per batch or page instead) and `AUTOINCREMENT`'s `sqlite_sequence` row. Ids
            // stay increasing without it through the high-water mark row (`Outbox.remove`).
            // The capture triggers name the table; they are recreated right after migrating.
            for trigger in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'ferry_capture_%'") {
                try db.execute(sql: "DROP TRIGGER \(trigger.quotedDatabaseIdentifier)")
            }
            try db.execute(
                sql: """
                    CREATE TABLE ferry_outbox_v3 (
                        id INTEGER PRIMARY KEY,
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        op TEXT NOT NULL,
                        data TEXT,
                        natural_key TEXT,
                        state INTEGER NOT NULL DEFAULT 0,
                        error TEXT
                    );
                    INSERT INTO ferry_outbox_v3 SELECT id, entity, entity_id, op, data, natural_key, state, error FROM ferry_outbox;
                    INSERT INTO ferry_outbox_v3 (id, entity, entity_id, op, state)
                    SELECT CASE WHEN sequence.seq > coalesce(outbox.top, 0) THEN sequence.seq ELSE 0 END, '', '', 'high-water mark', ?
                    FROM (SELECT max(id) AS top FROM ferry_outbox) AS outbox
                    LEFT JOIN (SELECT seq FROM sqlite_sequence WHERE name = 'ferry_outbox') AS sequence;
                    DROP TABLE ferry_outbox;
                    ALTER TABLE ferry_outbox_v3 RENAME TO ferry_outbox;
                    """,
                arguments: [OutboxState.highWaterMark.rawValue]
            )
        }
        migrator.registerMigration("ferry-v4") { db in
            // One client syncs a store at a time, across processes (`SyncLease`).
            try db.execute(
                sql: """
                    CREATE TABLE ferry_lease (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        holder TEXT NOT NULL,
                        pid INTEGER NOT NULL,
                        expires_at REAL NOT NULL
                    )
                    """
            )
        }
        migrator.registerMigration("ferry-v5") { db in
            // Entries ever sent (`Outbox.nextBatch` resends them as they were sent): 1, else
            // NULL, which a captured row gets without a default or a check to apply. An entry
            // queued before this migration may have been sent and put back after a lost answer:
            // it counts as sent (at worst, a batch ends a little early).
            try db.execute(
                sql: """
                    ALTER TABLE ferry_outbox ADD COLUMN sent INTEGER;
                    UPDATE ferry_outbox SET sent = 1 WHERE state IN (?, ?);
                    """,
                arguments: [OutboxState.pending.rawValue, OutboxState.inFlight.rawValue]
            )
        }
        migrator.registerMigration("ferry-v6") { db in
            // Queued entries by record. Applying an answer with merges or conflicts, and
            // pulling while changes are queued, look up the queued entries of a batch's or a
            // page's records: without this index each lookup scanned the queue, so draining a
            // million changes that the server merged cost the square of their count.
            try db.execute(sql: "CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity_id)")
        }
        migrator.registerMigration("ferry-v7") { db in
            // When each entry was queued (seconds since 1970), for "the oldest change has waited
            // since …" (`QueueSnapshot`). Entries queued before this migration have none.
            try db.execute(sql: "ALTER TABLE ferry_outbox ADD COLUMN queued_at REAL")
        }
        migrator.registerMigration("ferry-v8") { db in
            // When each entry was last taken in flight, for "in flight since …" (`QueueSnapshot`).
            try db.execute(sql: "ALTER TABLE ferry_outbox ADD COLUMN sent_at REAL")
        }
        migrator.registerMigration("ferry-v9") { db in
            // The highest mutation id this store ever sent under its client id: a server that has
            // processed a higher one heard from another holder of the id (`Outbox.apply`). A store
            // from before knows no better bound than its highest id. Each entry sent keeps the
            // client id it was sent under (`sent_as`), to be resent under it.
            // Fields of pulled records that the app's columns do not hold (`ferry_extras`), sent
            // back with the row's next change. Pulled records the app's schema refused (a UNIQUE
            // index, NOT NULL, a foreign key): kept with why, retried at the end of every pull,
            // instead of failing the page (`ferry_set_aside`).
            try db.execute(
                sql: """
                    ALTER TABLE ferry_meta ADD COLUMN highest_sent INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE ferry_outbox ADD COLUMN sent_as TEXT;
                    UPDATE ferry_meta SET highest_sent = coalesce((SELECT max(id) FROM ferry_outbox), 0);
                    CREATE TABLE ferry_extras (
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        data TEXT NOT NULL,
                        PRIMARY KEY (entity, entity_id)
                    ) WITHOUT ROWID;
                    CREATE TABLE ferry_set_aside (
                        entity TEXT NOT NULL,
                        entity_id TEXT NOT NULL,
                        version INTEGER NOT NULL,
                        deleted INTEGER NOT NULL,
                        data TEXT,
                        natural_key TEXT,
                        error TEXT NOT NULL,
                        at REAL NOT NULL,
                        PRIMARY KEY (entity, entity_id)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("ferry-v10") { db in
            // The mutation ids whose answers this store applied under its client id since its
            // last pull: the next pull names them, and the server leaves those writes out, since
            // this store holds them already (`Puller`). When an entry's change was made
            // (`changed_at`): an entry standing for coalesced edits keeps the last edit's time,
            // while `queued_at` keeps the first's, for how long the change has waited.
            try db.execute(
                sql: """
                    CREATE TABLE ferry_answered (id INTEGER PRIMARY KEY);
                    ALTER TABLE ferry_outbox ADD COLUMN changed_at REAL;
                    """
            )
        }
        migrator.registerMigration("ferry-v11") { db in
            // A pull from scratch on a store that holds records (its cursor refused after a purge
            // or a server restore, or a full sync) notes every record it brings back, across
            // launches, and at its end removes the records it did not bring (`Puller`).
            try db.execute(
                sql: """
                    ALTER TABLE ferry_meta ADD COLUMN scratch INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE ferry_scratch_seen (entity TEXT NOT NULL, entity_id TEXT NOT NULL, PRIMARY KEY (entity, entity_id)) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("ferry-v12") { db in
            // Spaces: each queued change names its space (NULL: personal), a record set aside
            // keeps its space, and the store keeps the memberships of the latest pull, which
            // the guard triggers read to refuse writes to a space it may only read, and the
            // spaces it joins while holding rows of them, with the records the join brought
            // (`SpaceMemberships`).
            try db.execute(
                sql: """
                    ALTER TABLE ferry_outbox ADD COLUMN space TEXT;
                    ALTER TABLE ferry_set_aside ADD COLUMN space TEXT;
                    CREATE TABLE ferry_spaces (space TEXT PRIMARY KEY NOT NULL, role TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE ferry_joins (space TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                    CREATE TABLE ferry_join_seen (
                        space TEXT NOT NULL, entity TEXT NOT NULL, entity_id TEXT NOT NULL, PRIMARY KEY (space, entity, entity_id)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("ferry-v13") { db in
            // A space deleted and created again under its id is another space: the store keeps
            // each membership's incarnation, and the last incarnation it saw of every space id
            // (kept after the membership ends: a write made since is bound to the space the
            // device last saw, never to one created later under its id), and each change queued
            // for a space the incarnation it was made in, which the server checks
            // (`Mutation.spaceIncarnation`).
            // Rows of the app's that reference rows leaving the store (a revoked space's) are held
            // aside whole (`ferry_held_rows`, `RecordWriter.remove`) until their parent returns.
            // An edit of a table that detects conflicts keeps the row as it was before it
            // (`base`): what a conflict policy merges from (`Conflict.base`).
            // A join's sweep considers only the rows the store held, with no change queued, when
            // the join began, at the version it knew then (`SpaceMemberships`): never a row this
            // device wrote or pushed since.
            try db.execute(
                sql: """
                    ALTER TABLE ferry_spaces ADD COLUMN incarnation TEXT;
                    ALTER TABLE ferry_outbox ADD COLUMN space_incarnation TEXT;
                    ALTER TABLE ferry_outbox ADD COLUMN base TEXT;
                    CREATE TABLE ferry_space_incarnations (space TEXT PRIMARY KEY NOT NULL, incarnation TEXT NOT NULL) WITHOUT ROWID;
                    CREATE TABLE ferry_held_rows (
                        id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, cols TEXT NOT NULL, vals TEXT NOT NULL,
                        entity TEXT, entity_id TEXT, version INTEGER
                    );
                    CREATE TABLE ferry_join_candidates (
                        space TEXT NOT NULL, entity TEXT NOT NULL, entity_id TEXT NOT NULL, version INTEGER,
                        PRIMARY KEY (space, entity, entity_id)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("ferry-v14") { db in
            // Attachments (PROTOCOL.md, "Attachments"): which the store holds in its folder and
            // which wait for upload (`AttachmentTable`).
            try db.execute(sql: AttachmentTable.createSQL)
        }
        migrator.registerMigration("ferry-v15") { db in
            // Uploads go in the order the app asks (`AttachmentPriority`).
            try db.execute(sql: AttachmentTable.addPrioritySQL)
        }
        return migrator
    }

    /// Queues an upload of the current state of `table`'s rows matching `condition` (all rows
    /// without one), as if each had just been written. For an app migration whose writes
    /// should reach the server: migrations run with change capture off.
    public static func queueUpload(of table: SyncedTable, where condition: String? = nil, arguments: StatementArguments = [], in db: Database) throws
    {
        try ChangeCapture.queueUpserts(of: table, where: condition, arguments: arguments, in: db)
    }

    /// Records a change that is not a row of a synced table; it is uploaded like any other.
    /// `space` names the space the record lives in (`nil`: the personal space); a space the
    /// store knows it may only read is refused with ``FerryError/readOnlySpace(_:)``.
    public func enqueue(
        entity: String,
        entityID: String,
        op: MutationOp,
        data: JSONObject? = nil,
        naturalKey: String? = nil,
        space: String? = nil
    ) async throws {
        let text = try data.map { String(decoding: try ProtocolValidation.encode($0), as: UTF8.self) }
        try await database.write { db in
            if let space, let role = try String.fetchOne(db, sql: "SELECT role FROM ferry_spaces WHERE space = ?", arguments: [space]),
                role == SpaceRole.read.rawValue
            {
                throw FerryError.readOnlySpace(SpaceGuard.message(space: space, role: role))
            }
            try OutboxTable.insert(
                entity: entity,
                entityID: entityID,
                op: op,
                data: text,
                naturalKey: naturalKey,
                space: space,
                spaceIncarnation: try space.flatMap { try SpaceMemberships.lastIncarnation(of: $0, db: db) },
                db: db
            )
        }
    }

    /// The table that holds `entity`'s records: its own, else a multi-entity table.
    func table(forEntity entity: String) -> SyncedTable? {
        tables.first { $0.entityColumn == nil && $0.entity == entity } ?? tables.first { $0.entityColumn != nil }
    }

    /// Runs `body` with change capture off, for writes that come from the server.
    static func withoutCapture<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try StoreMeta.setCapturing(false, db: db)
        defer { try? StoreMeta.setCapturing(true, db: db) }
        return try body()
    }

    /// Closes the database once the reads and writes in progress have finished; the store
    /// cannot be used afterwards.
    ///
    /// GRDB's `close()` blocks until those reads finish, and they may need a Swift concurrency
    /// thread to do so; it therefore waits on a dispatch queue of its own, never on one of
    /// the few cooperative threads (two on a 2-core machine).
    public func close() async throws {
        let database = self.database
        try await offCooperativeThreads("ferry.store.close") { try database.close() }
    }

    /// Reads the store file at `path` without changing a byte of it (no migration, no
    /// trigger, nothing created), for tools that look at a store an app may have open.
    ///
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store or cannot be read.
    static func readFile<T>(atPath path: String, _ read: (Database) throws -> T) throws -> T {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(10)
        do {
            let file = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? file.close() }
            return try file.read { db in
                guard try db.tableExists("grdb_migrations"),
                    try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM grdb_migrations WHERE identifier = 'ferry-v1')") == true,
                    try db.tableExists("ferry_outbox"), try db.tableExists("ferry_meta"), try db.tableExists("ferry_journal")
                else { throw FerryError.unreadableStore("\(path): not a Ferry store; nothing in it was changed") }
                return try read(db)
            }
        } catch let error as DatabaseError {
            throw FerryError.unreadableStore("\(path): \(error.message ?? "\(error.resultCode)"); nothing in it was changed", underlying: error)
        }
    }
}
