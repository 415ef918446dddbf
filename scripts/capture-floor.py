#!/usr/bin/env python3
"""What a capture trigger costs SQLite itself, with no Swift and no GRDB in the way.

`ferry bench --only capture` compares writes to a synced table (each copied into the outbox
by a trigger, in the same transaction) with the same writes to a table without triggers. This
script writes the bench's 100,000 rows, 1,000 a transaction, through Python's sqlite3 module
(WAL, synchronous=FULL, as a Ferry store), with the outbox row made in four ways:

- none: the uncaptured floor;
- minimal: a trigger inserting three columns into an outbox without an index;
- indexed: the same, with the outbox's index by record (`ferry_outbox_by_record`);
- ferry: the outbox row Ferry's trigger writes (`ChangeCapture`): the JSON of the row, a look
  for kept fields, the time queued, behind `WHEN capturing`.

Usage: python3 scripts/capture-floor.py [rounds]
"""

import os
import sqlite3
import sys
import tempfile
import time

ROWS = 100_000

SCHEMA = """
CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, sample_id TEXT);
CREATE TABLE ferry_meta (id INTEGER PRIMARY KEY, capturing INTEGER NOT NULL);
INSERT INTO ferry_meta VALUES (1, 1);
CREATE TABLE ferry_extras (entity TEXT NOT NULL, entity_id TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (entity, entity_id)) WITHOUT ROWID;
CREATE TABLE ferry_outbox (id INTEGER PRIMARY KEY, entity TEXT NOT NULL, entity_id TEXT NOT NULL, op TEXT NOT NULL,
    data TEXT, natural_key TEXT, state INTEGER NOT NULL DEFAULT 0, error TEXT, sent INTEGER, queued_at REAL,
    sent_at REAL, sent_as TEXT, changed_at REAL, space TEXT, space_incarnation TEXT, base TEXT);
"""

INDEX = "CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity_id);"

MINIMAL = """
CREATE TRIGGER capture AFTER INSERT ON events BEGIN
    INSERT INTO ferry_outbox (entity, entity_id, op) VALUES ('events', NEW.id, 'upsert');
END;
"""

FERRY = """
CREATE TRIGGER capture AFTER INSERT ON events WHEN (SELECT capturing FROM ferry_meta) BEGIN
    INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key, queued_at, space, space_incarnation, base)
    SELECT 'events', NEW.id, 'upsert',
        coalesce(
            (SELECT json_set(data, '$."kind"', NEW.kind, '$."sample_id"', NEW.sample_id, '$."value"', NEW.value)
                FROM ferry_extras WHERE entity = 'events' AND entity_id = NEW.id),
            json_object('kind', NEW.kind, 'sample_id', NEW.sample_id, 'value', NEW.value)),
        NEW.sample_id, ((julianday('now') - 2440587.5) * 86400.0), NULL, NULL, NULL;
END;
"""

VARIANTS = {"none": "", "minimal": MINIMAL, "indexed": INDEX + MINIMAL, "ferry": INDEX + FERRY}


def write(folder: str, name: str, setup: str) -> float:
    db = sqlite3.connect(os.path.join(folder, f"{name}.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.executescript(SCHEMA + setup)
    began = time.perf_counter()
    for start in range(0, ROWS, 1000):
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO events (id, kind, value, sample_id) VALUES (?, 'steps', ?, ?)",
            ((f"e-{i}", i, f"hk:{i}") for i in range(start, start + 1000)),
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - began
    queued = db.execute("SELECT count(*) FROM ferry_outbox").fetchone()[0]
    assert queued == (0 if name == "none" else ROWS), f"{name}: {queued} outbox rows"
    db.close()
    return elapsed


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"SQLite {sqlite3.sqlite_version}, {ROWS:,} rows, 1,000 a transaction; seconds (x the uncaptured floor)")
    for round in range(1, rounds + 1):
        with tempfile.TemporaryDirectory() as folder:
            times = {name: write(folder, name, setup) for name, setup in VARIANTS.items()}
        floor = times["none"]
        print(f"round {round}: " + ", ".join(f"{name} {seconds:.3f} ({seconds / floor:.2f}x)" for name, seconds in times.items()))


if __name__ == "__main__":
    main()
