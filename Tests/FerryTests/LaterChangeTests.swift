import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Synchronization
import Testing

/// Changes queued behind a mutation whose answer merges or conflicts were made on the same
/// knowledge as it: found by the fault schedules (seeds 97 and 190 of their first runs).
@Suite("Changes queued behind a merge or a conflict", .timeLimit(.minutes(1)))
struct LaterChangeTests {
    static func oneAtATime() -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.batchSize = 1  // each mutation its own batch, the next read while it is on the wire
        return configuration
    }

    static func value(of id: String, in store: FerryStore) async throws -> Int64? {
        try await store.database.read { db in try Int64.fetchOne(db, sql: "SELECT value FROM events WHERE id = ?", arguments: [id]) }
    }

    @Test("a new record merged into one the device also edited: the record ends with whichever edit came last, on the device and the server")
    func mergeThenBothEdited() async throws {
        // The merged record edited last, or the record it merges into edited last.
        for (statements, last) in [
            (
                [
                    "INSERT INTO events (id, value, hk) VALUES ('x', 5, 'hk-1')", "UPDATE events SET value = 7 WHERE id = 'c'",
                    "UPDATE events SET value = 8 WHERE id = 'x'",
                ], Int64(8)
            ),
            (["INSERT INTO events (id, value, hk) VALUES ('x', 5, 'hk-1')", "UPDATE events SET value = 7 WHERE id = 'c'"], Int64(7)),
        ] {
            try await TestServer.run { server in
                let token = try await TestServer.token(for: "alice")
                _ = try await server.pushOK(
                    PushRequest(
                        clientID: "watch",
                        mutations: [
                            .upsert(id: 1, entity: "events", entityID: "c", data: ["value": .integer(1)], naturalKey: "hk-1")
                        ]
                    ),
                    token: token
                )
                let store = try ClientFixture.openStore(at: ClientFixture.storePath())
                let client = ClientFixture.client(store: store, server: server, configuration: Self.oneAtATime())
                try await client.sync()
                // x is the same thing as c (one natural key); the server merges it into c.
                try await store.database.write { db in
                    for sql in statements { try db.execute(sql: sql) }
                }
                try await client.sync()

                let remote = try await server.pullAll(token: token)
                #expect(remote["events/c"]?.data?["value"] == .integer(last))
                #expect(try await Self.value(of: "c", in: store) == last, "the device shows what the server holds")
                #expect(try await Self.value(of: "x", in: store) == nil)
                #expect(await client.status.pending == 0)
            }
        }
    }

    @Test("two new records merged into one record in one batch, one of them deleted since: the record is deleted on the device and the server")
    func twoMergesOneDeleted() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            var configuration = SyncConfiguration()
            configuration.batchSize = 2
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server, configuration: configuration)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value, hk) VALUES ('a', 1, 'hk-1')") }
            try await client.sync()
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, value, hk) VALUES ('b', 2, 'hk-1')")
                try db.execute(sql: "INSERT INTO events (id, value, hk) VALUES ('c', 3, 'hk-1')")
                try db.execute(sql: "DELETE FROM events WHERE id = 'b'")  // b is a: the user deleted a
            }
            try await client.sync()

            let remote = try await server.pullAll(token: token)
            #expect(remote["events/a"]?.op == .delete)
            let local = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM events") }
            #expect(local.isEmpty, "the device holds \(local); the server holds none")
            #expect(await client.status.pending == 0)
        }
    }

    @Test("a conflict with a newer local edit queued behind it: the policy sees the newest edit, and its decision replaces the queued ones")
    func conflictWithLaterEdit() async throws {
        for keeps in [false, true] {
            try await TestServer.run { server in
                let token = try await TestServer.token(for: "alice")
                _ = try await server.pushOK(
                    PushRequest(
                        clientID: "laptop",
                        mutations: [
                            .upsert(id: 1, entity: "notes", entityID: "n", data: ["body": .string("server")])
                        ]
                    ),
                    token: token
                )
                let seen = Mutex<[String]>([])
                var configuration = Self.oneAtATime()
                configuration.conflictPolicy = ConflictPolicy { conflict in
                    guard case .string(let mine) = conflict.local?["body"], case .string(let theirs) = conflict.server?.data?["body"] else {
                        return .acceptServer
                    }
                    seen.withLock { $0.append(mine) }
                    return keeps ? .keep(["body": .string("\(theirs)+\(mine)")]) : .acceptServer
                }
                let store = try ClientFixture.openStore(at: ClientFixture.storePath())
                try await store.database.write { db in
                    try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'first')")
                    try db.execute(sql: "UPDATE notes SET body = 'second' WHERE id = 'n'")
                }
                // Two entries; with batches of one, 'first' goes alone over version 0 and conflicts.
                let client = ClientFixture.client(store: store, server: server, configuration: configuration)
                try await client.sync()

                let expected = keeps ? "server+second" : "server"
                #expect(seen.withLock { $0 } == ["second"], "the policy saw the newest local state")
                #expect(try await server.pullAll(token: token)["notes/n"]?.data?["body"] == .string(expected))
                let local = try await store.database.read { db in try String.fetchOne(db, sql: "SELECT body FROM notes WHERE id = 'n'") }
                #expect(local == expected)
                #expect(await client.status.pending == 0)
            }
        }
    }
}
