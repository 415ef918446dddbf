import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The PostgreSQL schema, as versioned migrations applied at start-up.
///
/// Every process starting against the database runs `migrate`: the migrations run in
/// one transaction that first takes an advisory lock, so when several processes start
/// at once one applies what is missing and the others wait, then find nothing to do.
/// DDL is transactional in PostgreSQL, so a migration that fails leaves nothing behind.
enum PostgresSchema {
    struct Migration: Sendable {
        var version: Int
        var name: String
        var statements: @Sendable () -> [PostgresQuery]
    }

    /// Names the advisory lock every Ferry process takes to migrate (the bytes of "ferrymig").
    static let migrationLock: Int64 = 0x6665_7272_796d_6967

    static let migrations: [Migration] = [
        Migration(version: 1, name: "records, clients, per-user change positions, rate limits") {
            [
                "CREATE TABLE server_meta (key text COLLATE \"C\" PRIMARY KEY, value bytea NOT NULL)",
                // One row per user: the last change position handed out. A push holds its user's
                // row lock until it commits, which orders the user's pushes (see PostgresSyncStorage).
                """
                CREATE TABLE user_changes (
                    user_id text COLLATE "C" PRIMARY KEY,
                    position bigint NOT NULL
                )
                """,
                """
                CREATE TABLE clients (
                    user_id text COLLATE "C" NOT NULL,
                    client_id text COLLATE "C" NOT NULL,
                    last_mutation_id bigint NOT NULL,
                    pushes bigint NOT NULL,
                    PRIMARY KEY (user_id, client_id)
                )
                """,
                """
                CREATE TABLE client_results (
                    user_id text COLLATE "C" NOT NULL,
                    client_id text COLLATE "C" NOT NULL,
                    slot integer NOT NULL,
                    results bytea NOT NULL,
                    PRIMARY KEY (user_id, client_id, slot)
                )
                """,
                // Text in the "C" collation compares bytes, as SQLite does: ids that differ only in
                // Unicode normalization are different records on both engines.
                """
                CREATE TABLE records (
                    user_id text COLLATE "C" NOT NULL,
                    entity text COLLATE "C" NOT NULL,
                    entity_id text COLLATE "C" NOT NULL,
                    version bigint NOT NULL,
                    deleted boolean NOT NULL,
                    natural_key text COLLATE "C",
                    data bytea,
                    seq bigint NOT NULL,
                    PRIMARY KEY (user_id, entity, entity_id)
                )
                """,
                """
                CREATE UNIQUE INDEX records_live_natural_key ON records (user_id, entity, natural_key)
                    WHERE natural_key IS NOT NULL AND NOT deleted
                """,
                "CREATE UNIQUE INDEX records_pull ON records (user_id, seq)",
                """
                CREATE TABLE rate_buckets (
                    user_id text COLLATE "C" PRIMARY KEY,
                    tokens double precision NOT NULL,
                    updated_at double precision NOT NULL
                )
                """,
                // One token from a user's bucket, decided under the bucket's row lock so that every
                // server process draws from the same quota. `p_now` is seconds since 1970; NULL
                // takes the database's clock, which all processes share.
                """
                CREATE FUNCTION ferry_take_token(
                    p_user text, p_capacity double precision, p_per_second double precision, p_now double precision,
                    OUT allowed boolean, OUT remaining double precision
                ) LANGUAGE plpgsql AS $$
                DECLARE
                    now_s double precision := coalesce(p_now, extract(epoch FROM clock_timestamp()));
                    last_s double precision;
                BEGIN
                    INSERT INTO rate_buckets (user_id, tokens, updated_at) VALUES (p_user, p_capacity, now_s)
                        ON CONFLICT (user_id) DO NOTHING;
                    SELECT b.tokens, b.updated_at INTO remaining, last_s FROM rate_buckets b WHERE b.user_id = p_user FOR UPDATE;
                    remaining := least(p_capacity, remaining + greatest(0, now_s - last_s) * p_per_second);
                    allowed := remaining >= 1;
                    IF allowed THEN remaining := remaining - 1; END IF;
                    UPDATE rate_buckets SET tokens = remaining, updated_at = greatest(last_s, now_s)
                        WHERE user_id = p_user;
                END
                $$
                """,
                "INSERT INTO server_meta (key, value) VALUES ('cursor_secret', \(randomSecret()))",
            ]
        },
        Migration(version: 2, name: "when each record last changed, and which client's mutation wrote it") {
            // For conflict policies (a delete's time included), and so a pull can leave a
            // client's own answered writes out. Rows written before have none of it, and are
            // always sent; so is a row an older server wrote since (its seq moved on).
            [
                """
                ALTER TABLE records ADD COLUMN changed_at bigint, ADD COLUMN written_by text COLLATE "C",
                    ADD COLUMN written_mutation bigint, ADD COLUMN written_seq bigint
                """
            ]
        },
        Migration(version: 3, name: "charging a request's cost to its user's quota") {
            // What a request cost beyond its one token (its bytes), taken after it was answered,
            // with the same refill rule as ferry_take_token; the bucket may owe up to one quota.
            [
                """
                CREATE FUNCTION ferry_charge_tokens(
                    p_user text, p_capacity double precision, p_per_second double precision, p_now double precision,
                    p_cost double precision
                ) RETURNS void LANGUAGE plpgsql AS $$
                DECLARE
                    now_s double precision := coalesce(p_now, extract(epoch FROM clock_timestamp()));
                BEGIN
                    INSERT INTO rate_buckets (user_id, tokens, updated_at) VALUES (p_user, p_capacity, now_s)
                        ON CONFLICT (user_id) DO NOTHING;
                    UPDATE rate_buckets SET
                        tokens = greatest(-p_capacity, least(p_capacity, tokens + greatest(0, now_s - updated_at) * p_per_second) - p_cost),
                        updated_at = greatest(updated_at, now_s)
                        WHERE user_id = p_user;
                END
                $$
                """
            ]
        },
        Migration(version: 4, name: "retention and restores: when rows were written, epochs, purge horizons") {
            // When each record state and client was last written (rows before this migration count
            // from now), the epoch of the process that wrote a user's changes last and where that
            // epoch began, and the user's purge horizon (`ChangeHead`); indexes find what to purge.
            let now = serverMilliseconds()
            return [
                PostgresQuery(unsafeSQL: "ALTER TABLE records ADD COLUMN written_at bigint NOT NULL DEFAULT \(now)"),
                PostgresQuery(unsafeSQL: "ALTER TABLE clients ADD COLUMN last_seen_at bigint NOT NULL DEFAULT \(now)"),
                """
                ALTER TABLE user_changes ADD COLUMN epoch bigint NOT NULL DEFAULT 0, ADD COLUMN epoch_base bigint NOT NULL DEFAULT 0,
                    ADD COLUMN purged_through bigint NOT NULL DEFAULT 0
                """,
                "CREATE INDEX records_tombstones ON records (written_at) WHERE deleted",
                "CREATE INDEX clients_idle ON clients (last_seen_at)",
            ]
        },
        Migration(version: 5, name: "no statistics on records.user_id and records.seq") {
            // No statistics on the columns every lookup and page is keyed by: the planner then
            // takes every user to be the same size and every position range alike, so a user a
            // stale sample never saw (or saw small) cannot get a plan that scans all of their
            // records per key or sorts everything after a cursor. Plans stay index walks.
            ["ALTER TABLE records ALTER COLUMN user_id SET STATISTICS 0, ALTER COLUMN seq SET STATISTICS 0"]
        },
        Migration(version: 6, name: "spaces and their members") {
            // A key per space, never reused; its records, change position and purge horizon live
            // under its partition (`SpacePartition`) in `records` and `user_changes`. A deleted
            // space's row stays, so a cursor naming its key can say which space was revoked.
            [
                """
                CREATE TABLE spaces (
                    key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    id text COLLATE "C" NOT NULL,
                    deleted boolean NOT NULL DEFAULT false
                )
                """,
                "CREATE UNIQUE INDEX spaces_live_id ON spaces (id) WHERE NOT deleted",
                """
                CREATE TABLE space_members (
                    space_key bigint NOT NULL,
                    user_id text COLLATE "C" NOT NULL,
                    role text NOT NULL,
                    PRIMARY KEY (space_key, user_id)
                )
                """,
                "CREATE UNIQUE INDEX space_members_user ON space_members (user_id, space_key)",
                // The version of each user's memberships, moved by every change that concerns them (`PullPosition`).
                "CREATE TABLE member_versions (user_id text COLLATE \"C\" PRIMARY KEY, version bigint NOT NULL)",
            ]
        },
        Migration(version: 7, name: "attachments each user uploaded") {
            // Attachments (PROTOCOL.md, "Attachments"): who uploaded which (an uploader may read
            // it), and which attachments each record references, by the record's partition (a
            // member of its space may read them).
            [
                """
                CREATE TABLE attachment_uploads (
                    user_id text COLLATE "C" NOT NULL,
                    digest text COLLATE "C" NOT NULL,
                    size bigint NOT NULL,
                    uploaded_at bigint NOT NULL,
                    PRIMARY KEY (user_id, digest)
                )
                """,
                "CREATE INDEX attachment_uploads_digest ON attachment_uploads (digest)",
                """
                CREATE TABLE attachment_refs (
                    partition text COLLATE "C" NOT NULL,
                    entity text COLLATE "C" NOT NULL,
                    entity_id text COLLATE "C" NOT NULL,
                    digest text COLLATE "C" NOT NULL,
                    PRIMARY KEY (partition, entity, entity_id, digest)
                )
                """,
                "CREATE INDEX attachment_refs_digest ON attachment_refs (digest, partition)",
            ]
        },
        Migration(version: 8, name: "uploads in progress, counted in their user's quota; attachments' media types") {
            [
                """
                CREATE TABLE open_uploads (
                    upload_id text COLLATE "C" PRIMARY KEY,
                    user_id text COLLATE "C" NOT NULL,
                    digest text COLLATE "C" NOT NULL,
                    length bigint,
                    held bigint NOT NULL,
                    touched_at bigint NOT NULL,
                    content_type text
                )
                """,
                "CREATE INDEX open_uploads_user ON open_uploads (user_id)",
                "ALTER TABLE attachment_uploads ADD COLUMN content_type text",
            ]
        },
        Migration(version: 9, name: "references a record released, readable until the janitor's sweep a day later") {
            [
                "ALTER TABLE attachment_refs ADD COLUMN released_at bigint",
                "CREATE INDEX attachment_refs_released ON attachment_refs (released_at) WHERE released_at IS NOT NULL",
                // A tombstone held its references until purged; now its deletion releases them.
                """
                UPDATE attachment_refs a SET released_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                FROM records r WHERE r.user_id = a.partition AND r.entity = a.entity AND r.entity_id = a.entity_id AND r.deleted
                """,
            ]
        },
        Migration(version: 10, name: "the side effects the app's rules ask for, delivered after the commit") {
            [
                """
                CREATE TABLE side_effects (
                    key text COLLATE "C" PRIMARY KEY,
                    kind text NOT NULL,
                    payload bytea NOT NULL,
                    created_at bigint NOT NULL,
                    due_at bigint NOT NULL,
                    claimed_until bigint,
                    attempts integer NOT NULL DEFAULT 0,
                    delivered_at bigint,
                    last_error text
                )
                """,
                "CREATE INDEX side_effects_due ON side_effects (due_at) WHERE delivered_at IS NULL",
            ]
        },
    ]

    /// Applies the migrations this database lacks, and returns the secret that signs cursors;
    /// refuses a database a newer Ferry migrated.
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> ByteBuffer {
        try await PostgresSyncStorage.transaction(connection, logger: logger) { db in
            // A process migrating for over a minute is stuck: fail with the reason, not wait forever.
            try await db.query("SET LOCAL lock_timeout = '60s'", logger: logger)
            // Ids and keys are any Unicode text: a database in another encoding would refuse some.
            for try await encoding in try await db.query("SHOW server_encoding", logger: logger).decode(String.self)
            where encoding != "UTF8" {
                throw StorageError.corrupt("the database's encoding is \(encoding); Ferry needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')")
            }
            // A pull page names a client's answered writes as a multirange (PostgreSQL 14).
            for try await version in try await db.query("SELECT current_setting('server_version_num')::int", logger: logger).decode(Int.self)
            where version < 140000 {
                throw StorageError.corrupt("the database is PostgreSQL \(version / 10000); Ferry needs PostgreSQL 14 or later")
            }
            _ = try await db.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger).collect()
            try await db.query(
                """
                CREATE TABLE IF NOT EXISTS ferry_migrations (
                    version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                logger: logger
            )
            var applied = 0
            for try await version in try await db.query("SELECT coalesce(max(version), 0) FROM ferry_migrations", logger: logger)
                .decode(Int.self)
            {
                applied = version
            }
            let latest = migrations.last?.version ?? 0
            guard applied <= latest else {
                throw StorageError.corrupt(
                    "the database is at schema version \(applied), made by a newer Ferry; this server knows versions up to \(latest)"
                )
            }
            for migration in migrations where migration.version > applied {
                for statement in migration.statements() { try await db.query(statement, logger: logger) }
                try await db.query(
                    "INSERT INTO ferry_migrations (version, name) VALUES (\(migration.version), \(migration.name))",
                    logger: logger
                )
                logger.info("applied database migration", metadata: ["version": "\(migration.version)", "name": "\(migration.name)"])
            }
            for try await secret in try await db.query("SELECT value FROM server_meta WHERE key = 'cursor_secret'", logger: logger)
                .decode(ByteBuffer.self)
            {
                return secret
            }
            throw StorageError.corrupt("server_meta has no cursor_secret")
        }
    }

    private static func randomSecret() -> ByteBuffer {
        var generator = SystemRandomNumberGenerator()
        return ByteBuffer(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
}
