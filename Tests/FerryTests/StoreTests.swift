import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

@Suite("Store", .timeLimit(.minutes(1)))
struct StoreTests {
    static func outbox(_ store: FerryStore) async throws -> [String] {
        try await store.database.read { db in
            try Row.fetchAll(db, sql: "SELECT entity_id, op, data FROM ferry_outbox WHERE state IN (0, 1) ORDER BY id")
                .map { "\($0[0] as String) \($0[1] as String) \($0[2] as String? ?? "-")" }
        }
    }

    static func migrations(_ more: (inout DatabaseMigrator) -> Void) -> DatabaseMigrator {
        var migrator = ClientFixture.schema()
        more(&migrator)
        return migrator
    }

    @Test(
        "an app migration drops a column of a synced table and rewrites its rows: the store opens, the rewrite is not uploaded, later writes are captured without the column"
    )
    func appMigrationOnSyncedTable() async throws {
        let path = ClientFixture.storePath()
        do {
            let store = try ClientFixture.openStore(at: path)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('e-1', 'steps', 1)") }
            try await store.close()
        }
        let upgraded = Self.migrations { migrator in
            migrator.registerMigration("app-v2") { db in
                try db.execute(sql: "ALTER TABLE events DROP COLUMN kind")
                try db.execute(sql: "ALTER TABLE notes RENAME COLUMN body TO text")
                try db.execute(sql: "UPDATE events SET value = value * 10")
            }
        }
        let store = try FerryStore(path: path, schema: upgraded, tables: [ClientFixture.events, ClientFixture.notes])
        #expect(try await Self.outbox(store) == [#"e-1 upsert {"kind":"steps","value":1}"#], "the migration's rewrite was not captured")
        try await store.database.write { db in
            try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-2', 2)")
            try db.execute(sql: "INSERT INTO notes (id, text) VALUES ('n-1', 'hello')")
        }
        #expect(try await Self.outbox(store).suffix(2) == [#"e-2 upsert {"value":2}"#, #"n-1 upsert {"text":"hello"}"#])
    }

    @Test("a migration whose rows should reach the server queues them with FerryStore.queueUpload")
    func migrationQueuesUpload() async throws {
        let path = ClientFixture.storePath()
        try await ClientFixture.openStore(at: path).close()
        let upgraded = Self.migrations { migrator in
            migrator.registerMigration("app-v2") { db in
                try db.execute(sql: "INSERT INTO events (id, value) VALUES ('imported-1', 1), ('imported-2', 2), ('local-only', 3)")
                try FerryStore.queueUpload(of: ClientFixture.events, where: "id LIKE ?", arguments: ["imported-%"], in: db)
            }
        }
        let store = try FerryStore(path: path, schema: upgraded, tables: [ClientFixture.events, ClientFixture.notes])
        #expect(try await Self.outbox(store) == [#"imported-1 upsert {"kind":null,"value":1}"#, #"imported-2 upsert {"kind":null,"value":2}"#])
    }

    @Test("a file that is not a SQLite database, or a Ferry store with its tables damaged, is refused with a clear error and left as it was")
    func unreadableFiles() async throws {
        let directory = TestDirectory.make("store")
        let text = directory.appendingPathComponent("notes.sqlite")
        try Data("this is not a database, but someone's notes\n".utf8).write(to: text)
        #expect {
            try ClientFixture.openStore(at: text.path)
        } throws: { error in
            "\(error)".contains("not a database") && "\(error)".contains("nothing in it was changed")
        }
        #expect(try Data(contentsOf: text) == Data("this is not a database, but someone's notes\n".utf8))

        let damaged = directory.appendingPathComponent("damaged.sqlite").path
        try await ClientFixture.openStore(at: damaged).close()
        let queue = try DatabaseQueue(path: damaged)
        try await queue.write { db in try db.execute(sql: "DELETE FROM ferry_meta") }
        try queue.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: damaged))
        #expect {
            try ClientFixture.openStore(at: damaged)
        } throws: { error in
            "\(error)".contains("damaged")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: damaged)) == before)
    }

    @Test(
        "a table that cannot sync is refused when the store opens, saying why: an entity name the protocol refuses, no unique key",
        arguments: [
            ("CREATE TABLE Events (id TEXT PRIMARY KEY NOT NULL)", SyncedTable(table: "Events"), "does not match"),
            ("CREATE TABLE events (id TEXT NOT NULL, v INTEGER)", SyncedTable(table: "events"), "PRIMARY KEY or UNIQUE constraint on exactly (id)"),
            ("CREATE TABLE events (id TEXT NOT NULL, v INTEGER, UNIQUE (id, v))", SyncedTable(table: "events"), "exactly (id)"),
            (
                "CREATE TABLE events (id TEXT NOT NULL, v INTEGER); CREATE UNIQUE INDEX live ON events (id) WHERE v > 0",
                SyncedTable(table: "events"), "exactly (id)"
            ),
            (
                "CREATE TABLE items (entity TEXT NOT NULL, id TEXT PRIMARY KEY NOT NULL)", SyncedTable.multiEntity(table: "items"),
                "exactly (entity, id)"
            ),
            ("CREATE TABLE photos (id TEXT PRIMARY KEY NOT NULL, image BLOB)", SyncedTable(table: "photos"), "column image is declared BLOB"),
        ]
    )
    func tablesThatCannotSync(sql: String, table: SyncedTable, reason: String) throws {
        var schema = DatabaseMigrator()
        schema.registerMigration("v1") { db in try db.execute(sql: sql) }
        let path = TestDirectory.make("store").appendingPathComponent("alice.sqlite").path
        #expect {
            try FerryStore(path: path, schema: schema, tables: [table])
        } throws: { error in
            guard let error = error as? FerryError, error.code == .invalidTable else { return false }
            let why = error.message
            return why.contains(reason)
        }
    }

    @Test("bytes kept in a table that is not synced, a document table and a column without a type open, and their writes are captured")
    func blobOutsideSyncedColumns() async throws {
        var schema = DatabaseMigrator()
        schema.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE docs (id TEXT PRIMARY KEY NOT NULL, body TEXT);
                    CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, anything);
                    CREATE TABLE thumbnails (id TEXT PRIMARY KEY NOT NULL, image BLOB);
                    """
            )
        }
        let path = TestDirectory.make("store").appendingPathComponent("alice.sqlite").path
        let store = try FerryStore(
            path: path,
            schema: schema,
            tables: [SyncedTable(table: "docs", layout: .document(column: "body")), SyncedTable(table: "notes")]
        )
        try await store.database.write { db in
            try db.execute(sql: "INSERT INTO docs (id, body) VALUES ('d', '{\"a\":1}')")
            try db.execute(sql: "INSERT INTO thumbnails (id, image) VALUES ('d', ?)", arguments: [Data([0, 1, 2])])
            try db.execute(sql: "INSERT INTO notes (id, anything) VALUES ('n', 'text')")
        }
        #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 0") } == 2)
    }

    @Test("a table opens with any key pulls can match: a primary key, a unique index, the composite key of a multi-entity table")
    func tablesThatCanSync() throws {
        var schema = DatabaseMigrator()
        schema.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, v INTEGER);
                    CREATE TABLE notes (id TEXT NOT NULL, body TEXT);
                    CREATE UNIQUE INDEX notes_by_id ON notes (ID);
                    CREATE TABLE items (entity TEXT NOT NULL, id TEXT NOT NULL, body TEXT, PRIMARY KEY (id, entity));
                    """
            )
        }
        let path = TestDirectory.make("store").appendingPathComponent("alice.sqlite").path
        _ = try FerryStore(
            path: path,
            schema: schema,
            tables: [SyncedTable(table: "events"), SyncedTable(table: "notes"), .multiEntity(table: "items")]
        )
    }

    @Test("store files are named from a hash of the user id: ids that differ in case get their own files; a store under the old name is carried over")
    func storeFileNames() async throws {
        let directory = TestDirectory.make("stores")
        let bob = try StoreLocation.path(forUser: "Bob", in: directory)
        let lowercaseBob = try StoreLocation.path(forUser: "bob", in: directory)
        #expect(bob.lastPathComponent.lowercased() != lowercaseBob.lastPathComponent.lowercased())
        #expect(StoreLocation.fileName(forUser: "a/../../etc").allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." })

        // A store of an earlier version, named after the id, with a change still queued.
        let legacy = directory.appendingPathComponent("carol%40example%2Ecom.sqlite").path
        let old = try ClientFixture.openStore(at: legacy)
        try await old.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('queued', 1)") }
        let clientID = old.clientID
        try await old.close()
        let carried = try StoreLocation.path(forUser: "carol@example.com", in: directory)
        #expect(!FileManager.default.fileExists(atPath: legacy))
        let store = try ClientFixture.openStore(at: carried.path)
        #expect(store.clientID == clientID)
        #expect(try await Self.outbox(store).count == 1)

        // Another process still has its old-name store open, with commits in the log: it stays put.
        let busyLegacy = directory.appendingPathComponent("dave.sqlite").path
        let open = try ClientFixture.openStore(at: busyLegacy)
        try await open.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('in-the-log', 1)") }
        let reader = try await open.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events") }
        #expect(reader == 1)
        #expect(try StoreLocation.path(forUser: "dave", in: directory).path == busyLegacy)
        #expect(try await Self.outbox(open).count == 1)
    }

    @Test("two processes opening a store that needs a migration at once (an app and its extension): both open it, the migration runs once")
    func concurrentMigration() async throws {
        for _ in 0..<10 {
            let path = ClientFixture.storePath()
            // A store from before ferry-v6: its queue, without the index by record.
            let old = try ClientFixture.openStore(at: path)
            try await old.database.write { db in
                for index in 0..<2000 { try db.execute(sql: "INSERT INTO events (id, kind) VALUES (?, 'x')", arguments: ["e-\(index)"]) }
                try db.execute(sql: "DROP INDEX ferry_outbox_by_record; DELETE FROM grdb_migrations WHERE identifier = 'ferry-v6'")
            }
            try await old.close()
            // Each opens on a thread of its own, as two processes would; both close afterwards.
            let opened = await withTaskGroup(of: Result<FerryStore, any Error>.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        await withCheckedContinuation { continuation in
                            Thread.detachNewThread { continuation.resume(returning: Result { try ClientFixture.openStore(at: path) }) }
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for result in opened {
                let store = try result.get()
                #expect(
                    try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 0") } == 2000
                )
                #expect(try await store.database.read { db in try db.indexes(on: "ferry_outbox").map(\.name) } == ["ferry_outbox_by_record"])
                try await store.close()
            }
        }
    }

    @Test("four processes creating one new store at once (an app and its extensions at first launch): all open it, ten times over")
    func concurrentCreation() async throws {
        for _ in 0..<10 {
            let path = ClientFixture.storePath()
            let opened = await withTaskGroup(of: Result<FerryStore, any Error>.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        await withCheckedContinuation { continuation in
                            Thread.detachNewThread { continuation.resume(returning: Result { try ClientFixture.openStore(at: path) }) }
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let stores = try opened.map { try $0.get() }
            #expect(Set(stores.map(\.clientID)).count == 1)
            for store in stores { try await store.close() }
        }
    }

    @Test("the journal keeps its newest events, up to its capacity")
    func boundedJournal() async throws {
        let store = try ClientFixture.openStore(at: ClientFixture.storePath())
        let journal = Journal(store: store, capacity: 50)
        for index in 0..<120 { await journal.record(JournalEvent(kind: JournalEvent.Kind(rawValue: "test"), message: "event \(index)")) }
        let events = try await journal.events()
        #expect(events.count == 50)
        #expect(events.first?.message == "event 70")
        #expect(events.last?.message == "event 119")
        let rows = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_journal") }
        #expect(rows == 50)
    }
}

@Suite("A pull's answered ids")
struct AnsweredRangesTests {
    @Test("ranges past the cap are sent back, but the highest id is always named, so a server that lost it is found out")
    func highestAlwaysNamed() {
        #expect(Puller.ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8")
        let spread = (1...301).map { Int64($0 * 2) }  // 301 ranges: one over the cap
        let text = Puller.ranges(spread)
        let items = text.split(separator: ",")
        #expect(items.count == Puller.maxAnsweredRanges + 1)
        #expect(items.last == "602" && items[items.count - 2] == "600", "\(items.suffix(3))")
    }
}
