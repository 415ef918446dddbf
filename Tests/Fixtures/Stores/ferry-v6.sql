PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
INSERT INTO grdb_migrations VALUES('ferry-v1');
INSERT INTO grdb_migrations VALUES('ferry-v2');
INSERT INTO grdb_migrations VALUES('ferry-v3');
INSERT INTO grdb_migrations VALUES('ferry-v4');
INSERT INTO grdb_migrations VALUES('ferry-v5');
INSERT INTO grdb_migrations VALUES('ferry-v6');
INSERT INTO grdb_migrations VALUES('app-v1');
CREATE TABLE ferry_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    client_id TEXT NOT NULL,
    capturing INTEGER NOT NULL,
    cursor TEXT,
    last_synced_at REAL
);
INSERT INTO ferry_meta VALUES(1,'c-5576c17c02014a8c8c2e',1,NULL,NULL);
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
, sent INTEGER);
INSERT INTO ferry_outbox VALUES(0,'','','high-water mark',NULL,NULL,3,NULL,NULL);
INSERT INTO ferry_outbox VALUES(1,'events','e2','upsert','{"hk":null,"id":"e2","kind":"old","value":20}',NULL,0,NULL,NULL);
INSERT INTO ferry_outbox VALUES(2,'events','e3','delete',NULL,NULL,0,NULL,NULL);
INSERT INTO ferry_outbox VALUES(3,'events','e4','upsert','{"hk":null,"id":"e4","kind":"new","value":4}',NULL,0,NULL,NULL);
CREATE TABLE ferry_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, hk TEXT);
INSERT INTO events VALUES('e1','old',1,NULL);
INSERT INTO events VALUES('e2','old',20,NULL);
INSERT INTO events VALUES('e4','new',4,NULL);
CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
DELETE FROM sqlite_sequence;
CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity_id);
COMMIT;
