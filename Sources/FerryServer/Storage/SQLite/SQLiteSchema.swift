import Foundation
import GRDB

/// The server's tables on SQLite, one migration per version: a database is brought forward
/// from whatever version it holds, and one a newer Ferry migrated is refused.
enum SQLiteSchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1", migrate: migrateV1)
        migrator.registerMigration("v2", migrate: migrateV2)
        migrator.registerMigration("v3", migrate: migrateV3)
        migrator.registerMigration("v4", migrate: migrateV4)
        migrator.registerMigration("v5", migrate: migrateV5)
        migrator.registerMigration("v6", migrate: migrateV6)
        migrator.registerMigration("v7", migrate: migrateV7)
        migrator.registerMigration("v8", migrate: migrateV8)
        migrator.registerMigration("v9", migrate: migrateV9)
        return migrator
    }

    /// Migration `v1`.
    private static func migrateV1(_ db: Database) throws {
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

    /// Migration `v2`.
    private static func migrateV2(_ db: Database) throws {
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

    /// Migration `v3`.
    private static func migrateV3(_ db: Database) throws {
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

    /// Migration `v4`.
    private static func migrateV4(_ db: Database) throws {
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

    /// Migration `v5`.
    private static func migrateV5(_ db: Database) throws {
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

    /// Migration `v6`.
    private static func migrateV6(_ db: Database) throws {
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

    /// Migration `v7`.
    private static func migrateV7(_ db: Database) throws {
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

    /// Migration `v8`.
    private static func migrateV8(_ db: Database) throws {
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

    /// Migration `v9`.
    private static func migrateV9(_ db: Database) throws {
        // The side effects the app's rules ask for (issue 53), written with the writes that
        // asked, delivered after the commit: due from `due_at`, held by a worker until
        // `claimed_until`, done at `delivered_at`.
        try db.execute(
            sql: """
                CREATE TABLE side_effects (
                    key TEXT PRIMARY KEY NOT NULL,
                    kind TEXT NOT NULL,
                    payload BLOB NOT NULL,
                    created_at INTEGER NOT NULL,
                    due_at INTEGER NOT NULL,
                    claimed_until INTEGER,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    delivered_at INTEGER,
                    last_error TEXT
                ) WITHOUT ROWID;
                CREATE INDEX side_effects_due ON side_effects (due_at) WHERE delivered_at IS NULL;
                """
        )
    }
}
