import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// The server skips any mutation id at or below the highest it has seen from a client, so
/// outbox ids must keep increasing for the life of the file, even when the outbox empties.
@Suite("Mutation ids", .timeLimit(.minutes(1)))
struct MutationIDTests {
    @Test("after the outbox empties and a dead letter at the top is discarded, new changes get new ids and are applied")
    func idsNeverReused() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('a', 'x')") }
            try await store.enqueue(entity: "Not-An-Entity", entityID: "z", op: .upsert, data: [:])
            #expect(try await client.sync().upload.deadLettered == 1)
            try await client.discardDeadLetters()
            #expect(try await Self.queuedIDs(store).isEmpty)

            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('b', 'x')") }
            #expect(try await Self.queuedIDs(store) == [3])
            #expect(try await client.sync().upload.acknowledged == 1)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('c', 'x')") }
            #expect(try await Self.queuedIDs(store) == [4])
            #expect(try await client.sync().upload.acknowledged == 1)

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(Set(remote.keys) == ["events/a", "events/b", "events/c"])
        }
    }

    @Test("a store from before ferry-v3 (AUTOINCREMENT, emptied outbox) keeps counting from its last id")
    func migrationKeepsSequence() async throws {
        let path = ClientFixture.storePath()
        // The file as ferry-v2 left it: 40 ids spent and acknowledged, one dead letter at 7.
        let old = try DatabaseQueue(path: path)
        try await old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('ferry-v1'), ('ferry-v2');
                    CREATE TABLE ferry_meta (id INTEGER PRIMARY KEY CHECK (id = 1), client_id TEXT NOT NULL, capturing INTEGER NOT NULL, cursor TEXT, last_synced_at REAL);
                    INSERT INTO ferry_meta (id, client_id, capturing) VALUES (1, 'c-old', 1);
                    CREATE TABLE ferry_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, entity TEXT NOT NULL, entity_id TEXT NOT NULL, op TEXT NOT NULL, data TEXT, natural_key TEXT, state INTEGER NOT NULL DEFAULT 0, error TEXT);
                    CREATE INDEX ferry_outbox_by_record ON ferry_outbox (entity, entity_id);
                    CREATE TABLE ferry_versions (entity TEXT NOT NULL, entity_id TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (entity, entity_id)) WITHOUT ROWID;
                    CREATE TABLE ferry_journal (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, event TEXT NOT NULL);
                    INSERT INTO ferry_outbox (id, entity, entity_id, op, state, error) VALUES (7, 'events', 'x', 'upsert', 2, 'rejected'), (40, 'events', 'y', 'upsert', 0, NULL);
                    DELETE FROM ferry_outbox WHERE id = 40;
                    """
            )
        }
        try old.close()

        let store = try ClientFixture.openStore(at: path)
        try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('a', 'x')") }
        #expect(try await Self.queuedIDs(store) == [41])
        #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT id FROM ferry_outbox WHERE state = 2") } == 7)
        // ferry-v3's rebuilt table kept no index; ferry-v6 added back the one by record.
        #expect(try await store.database.read { db in try db.indexes(on: "ferry_outbox").map(\.name) } == ["ferry_outbox_by_record"])
        try await store.close()
    }

    private static func queuedIDs(_ store: FerryStore) async throws -> [Int64] {
        try await store.database.read { db in
            try Int64.fetchAll(db, sql: "SELECT id FROM ferry_outbox WHERE \(OutboxState.queuedCondition) ORDER BY id")
        }
    }
}
