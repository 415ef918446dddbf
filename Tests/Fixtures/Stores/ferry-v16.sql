PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
INSERT INTO grdb_migrations VALUES('ferry-v1');
INSERT INTO grdb_migrations VALUES('ferry-v2');
INSERT INTO grdb_migrations VALUES('ferry-v3');
INSERT INTO grdb_migrations VALUES('ferry-v4');
INSERT INTO grdb_migrations VALUES('ferry-v5');
INSERT INTO grdb_migrations VALUES('ferry-v6');
INSERT INTO grdb_migrations VALUES('ferry-v7');
INSERT INTO grdb_migrations VALUES('ferry-v8');
INSERT INTO grdb_migrations VALUES('ferry-v9');
INSERT INTO grdb_migrations VALUES('ferry-v10');
INSERT INTO grdb_migrations VALUES('ferry-v11');
INSERT INTO grdb_migrations VALUES('ferry-v12');
INSERT INTO grdb_migrations VALUES('ferry-v13');
INSERT INTO grdb_migrations VALUES('ferry-v14');
INSERT INTO grdb_migrations VALUES('ferry-v15');
INSERT INTO grdb_migrations VALUES('ferry-v16');
INSERT INTO grdb_migrations VALUES('app-v1');
CREATE TABLE ferry_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    client_id TEXT NOT NULL,
    capturing INTEGER NOT NULL,
    cursor TEXT,
    last_synced_at REAL
, highest_sent INTEGER NOT NULL DEFAULT 0, scratch INTEGER NOT NULL DEFAULT 0, left_out_by TEXT);
INSERT INTO ferry_meta VALUES(1,'c-4eb16b2d2ba04a1da980',1,NULL,NULL,0,0,NULL);
CREATE TABLE ferry_versions (
    entity TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (entity, entity_id)
) WITHOUT ROWID;
INSERT INTO ferry_versions VALUES('events','e1',1);
INSERT INTO ferry_versions VALUES('events','e2',1);
INSERT INTO ferry_versions VALUES('events','e3',1);
CREATE TABLE ferry_journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    event TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS "ferry_outbox" (
    id INTEGER PRIMARY KEY,
    entity TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    op TEXT NOT NULL,
    data TEXT,
    natural_key TEXT,
    state INTEGER NOT NULL DEFAULT 0,
    error TEXT
, sent INTEGER, queued_at REAL, sent_at REAL, sent_as TEXT, changed_at REAL, space TEXT, space_incarnation TEXT, base TEXT);
INSERT INTO ferry_outbox VALUES(0,'','','high-water mark',NULL,NULL,3,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
INSERT INTO ferry_outbox VALUES(1,'events','e2','upsert','{"hk":null,"id":"e2","kind":"old","value":20}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
INSERT INTO ferry_outbox VALUES(2,'events','e3','delete',NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
INSERT INTO ferry_outbox VALUES(3,'events','e4','upsert','{"hk":null,"id":"e4","kind":"new","value":4}',NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
CREATE TABLE ferry_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
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
    at REAL NOT NULL, space TEXT,
    PRIMARY KEY (entity, entity_id)
) WITHOUT ROWID;
CREATE TABLE ferry_answered (id INTEGER PRIMARY KEY);
CREATE TABLE ferry_scratch_seen (entity TEXT NOT NULL, entity_id TEXT NOT NULL, PRIMARY KEY (entity, entity_id)) WITHOUT ROWID;
CREATE TABLE ferry_spaces (space TEXT PRIMARY KEY NOT NULL, role TEXT NOT NULL, incarnation TEXT) WITHOUT ROWID;
CREATE TABLE ferry_joins (space TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
CREATE TABLE ferry_join_seen (
    space TEXT NOT NULL, entity TEXT NOT NULL, entity_id TEXT NOT NULL, PRIMARY KEY (space, entity, entity_id)
) WITHOUT ROWID;
CREATE TABLE ferry_space_incarnations (space TEXT PRIMARY KEY NOT NULL, incarnation TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE ferry_held_rows (
    id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, cols TEXT NOT NULL, vals TEXT NOT NULL,
    entity TEXT, entity_id TEXT, version INTEGER
);
CREATE TABLE ferry_join_candidates (
    space TEXT NOT NULL, entity TEXT NOT NULL, entity_id TEXT NOT NULL, version INTEGER,
    PRIMARY KEY (space, entity, entity_id)
) WITHOUT ROWID;
CREATE TABLE ferry_attachments (
    digest TEXT PRIMARY KEY NOT NULL,
    size INTEGER NOT NULL,
    content_type TEXT,
    upload INTEGER NOT NULL,
    stored INTEGER NOT NULL,
    used_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT
, priority INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, hk TEXT);
INSERT INTO events VALUES('e1','old',1,NULL);
INSERT INTO events VALUES('e2','old',20,NULL);
INSERT INTO events VALUES('e4','new',4,NULL);
CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
DELETE FROM sqlite_sequence;
CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity_id);
COMMIT;
