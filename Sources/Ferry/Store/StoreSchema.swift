import Foundation
import GRDB

/// Ferry's own tables in an app's store (`ferry_*`), one migration per version, run before
/// the app's own: a store is brought forward from whatever version it holds.
enum StoreSchema {
    /// Whether the file's migrations say it is a Ferry store.
    static func isMigrated(_ db: Database) throws -> Bool {
        try db.tableExists("grdb_migrations")
            && Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM grdb_migrations WHERE identifier = 'ferry-v1')") == true
    }

    /// Whether the file holds the tables every Ferry store has: a damaged one may not.
    static func holdsTables(_ db: Database) throws -> Bool {
        try ["ferry_meta", "ferry_outbox", "ferry_journal"].allSatisfy { try db.tableExists($0) }
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("ferry-v1", migrate: migrateV1)
        migrator.registerMigration("ferry-v2", migrate: migrateV2)
        migrator.registerMigration("ferry-v3", migrate: migrateV3)
        migrator.registerMigration("ferry-v4", migrate: migrateV4)
        migrator.registerMigration("ferry-v5", migrate: migrateV5)
        migrator.registerMigration("ferry-v6", migrate: migrateV6)
        migrator.registerMigration("ferry-v7", migrate: migrateV7)
        migrator.registerMigration("ferry-v8", migrate: migrateV8)
        migrator.registerMigration("ferry-v9", migrate: migrateV9)
        migrator.registerMigration("ferry-v10", migrate: migrateV10)
        migrator.registerMigration("ferry-v11", migrate: migrateV11)
        migrator.registerMigration("ferry-v12", migrate: migrateV12)
        migrator.registerMigration("ferry-v13", migrate: migrateV13)
        migrator.registerMigration("ferry-v14", migrate: migrateV14)
        migrator.registerMigration("ferry-v15", migrate: migrateV15)
        migrator.registerMigration("ferry-v16", migrate: migrateV16)
        return migrator
    }

    /// Migration `ferry-v1`.
    private static func migrateV1(_ db: Database) throws {
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

    /// Migration `ferry-v2`.
    private static func migrateV2(_ db: Database) throws {
        // Every captured write paid for this index, to spare `nextBatch` a walk in id
        // order past in-flight and dead-lettered entries (one batch, plus the few the
        // server refused): a poor trade. Without it capture costs one B-tree write less.
        try db.execute(sql: "DROP INDEX ferry_outbox_by_state")
    }

    /// Migration `ferry-v3`.
    private static func migrateV3(_ db: Database) throws {
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

    /// Migration `ferry-v4`.
    private static func migrateV4(_ db: Database) throws {
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

    /// Migration `ferry-v5`.
    private static func migrateV5(_ db: Database) throws {
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

    /// Migration `ferry-v6`.
    private static func migrateV6(_ db: Database) throws {
        // Queued entries by record. Applying an answer with merges or conflicts, and
        // pulling while changes are queued, look up the queued entries of a batch's or a
        // page's records: without this index each lookup scanned the queue, so draining a
        // million changes that the server merged cost the square of their count.
        try db.execute(sql: "CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity_id)")
    }

    /// Migration `ferry-v7`.
    private static func migrateV7(_ db: Database) throws {
        // When each entry was queued (seconds since 1970), for "the oldest change has waited
        // since …" (`QueueSnapshot`). Entries queued before this migration have none.
        try db.execute(sql: "ALTER TABLE ferry_outbox ADD COLUMN queued_at REAL")
    }

    /// Migration `ferry-v8`.
    private static func migrateV8(_ db: Database) throws {
        // When each entry was last taken in flight, for "in flight since …" (`QueueSnapshot`).
        try db.execute(sql: "ALTER TABLE ferry_outbox ADD COLUMN sent_at REAL")
    }

    /// Migration `ferry-v9`.
    private static func migrateV9(_ db: Database) throws {
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

    /// Migration `ferry-v10`.
    private static func migrateV10(_ db: Database) throws {
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

    /// Migration `ferry-v11`.
    private static func migrateV11(_ db: Database) throws {
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

    /// Migration `ferry-v12`.
    private static func migrateV12(_ db: Database) throws {
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

    /// Migration `ferry-v13`.
    private static func migrateV13(_ db: Database) throws {
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

    /// Migration `ferry-v14`.
    private static func migrateV14(_ db: Database) throws {
        // Attachments (PROTOCOL.md, "Attachments"): which the store holds in its folder and
        // which wait for upload (`AttachmentTable`).
        try db.execute(sql: AttachmentTable.createSQL)
    }

    /// Migration `ferry-v15`.
    private static func migrateV15(_ db: Database) throws {
        // Uploads go in the order the app asks (`AttachmentPriority`).
        try db.execute(sql: AttachmentTable.addPrioritySQL)
    }

    private static func migrateV16(_ db: Database) throws {
        // The protocol version that left out pulled changes it did not know (`StoreMeta.leftOutBy`).
        try db.execute(sql: "ALTER TABLE ferry_meta ADD COLUMN left_out_by TEXT")
    }
}
