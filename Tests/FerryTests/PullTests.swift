import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@Suite("Pull", .timeLimit(.minutes(1)))
struct ClientPullTests {
    @Test("remote inserts, updates and deletes arrive; pulled rows are not re-uploaded; a pending local edit survives")
    func remoteChanges() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "a", data: ["kind": .string("run"), "value": .integer(1)], naturalKey: "hk:a"),
                        .upsert(id: 2, entity: "events", entityID: "b", data: ["kind": .string("walk"), "value": .integer(2)]),
                        .upsert(id: 3, entity: "events", entityID: "c", data: ["kind": .string("swim"), "value": .integer(3)]),
                    ]
                ),
                token: token
            )
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            var report = try await client.sync()
            #expect(report.pull.applied == 3)
            #expect(report.upload.requests == 0)
            #expect(await client.status.pending == 0, "pulled rows must not be captured")
            let row = try await store.database.read { db in
                try Row.fetchOne(db, sql: "SELECT kind, hk FROM events WHERE id = 'a'").map { [$0["kind"] as String?, $0["hk"] as String?] }
            }
            #expect(row == ["run", "hk:a"])

            // Remote: update a, delete b. Local: edit c, still queued when the pull comes.
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [
                        .upsert(id: 4, entity: "events", entityID: "a", data: ["kind": .string("run"), "value": .integer(10)], naturalKey: "hk:a"),
                        .delete(id: 5, entity: "events", entityID: "b"),
                        .upsert(id: 6, entity: "events", entityID: "c", data: ["kind": .string("swim"), "value": .integer(30)]),
                    ]
                ),
                token: token
            )
            try await store.database.write { db in try db.execute(sql: "UPDATE events SET value = 300 WHERE id = 'c'") }
            report = try await client.sync()
            let rows = try await store.database.read { db in
                try Dictionary(
                    uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT id, value FROM events").map { ($0["id"] as String, $0["value"] as Int) }
                )
            }
            #expect(rows["a"] == 10)
            #expect(rows["b"] == nil)
            #expect(rows["c"] == 300, "the local edit went up before the pull and stays")
            let remote = try await server.pullAll(token: token)
            #expect(remote["events/c"]?.data?["value"] == .integer(300))
            #expect(await client.status.pending == 0)
        }
    }

    @Test("conflicts: server wins replaces the local row; client wins sends the local change again")
    func conflictPolicies() async throws {
        for policy in ["serverWins", "clientWins"] {
            try await TestServer.run { server in
                let token = try await TestServer.token(for: "alice")
                let store = try ClientFixture.openStore(at: ClientFixture.storePath())
                var configuration = SyncConfiguration()
                configuration.conflictPolicy = policy == "serverWins" ? .serverWins : .clientWins
                let client = ClientFixture.client(store: store, server: server, configuration: configuration)
                try await store.database.write { db in try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'first')") }
                try await client.sync()
                // Another device changes the note; this one edits it before hearing of that.
                _ = try await server.pushOK(
                    PushRequest(clientID: "web", mutations: [.upsert(id: 1, entity: "notes", entityID: "n", data: ["body": .string("theirs")])]),
                    token: token
                )
                try await store.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'mine' WHERE id = 'n'") }
                let report = try await client.sync()
                #expect(report.upload.conflicts == 1)
                let local = try await store.database.read { db in try String.fetchOne(db, sql: "SELECT body FROM notes WHERE id = 'n'") }
                let remote = try await server.pullAll(token: token)["notes/n"]?.data?["body"]
                let expected = policy == "serverWins" ? "theirs" : "mine"
                #expect(local == expected, "\(policy)")
                #expect(remote == .string(expected), "\(policy)")
                #expect(await client.status.pending == 0)
            }
        }
    }
}
