import Clocks
import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@Suite("Pull", .timeLimit(.minutes(1)))
struct ClientPullTests {
    @Test("a relaunch with nothing changed costs one pull that returns nothing; an explicit full sync pulls everything again")
    func relaunchPullsFromCursor() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            for push in 0..<3 {
                let mutations = (0..<1000).map { index in
                    Mutation.upsert(id: Int64(push * 1000 + index + 1), entity: "events", entityID: "e-\(push)-\(index)", data: .value(Int64(index)))
                }
                _ = try await server.pushOK(PushRequest(clientID: "web", mutations: mutations), token: token)
            }
            let path = ClientFixture.storePath()
            let first = try ClientFixture.openStore(at: path)
            #expect(try await ClientFixture.client(store: first, server: server).sync().pull.received == 3000)
            try await first.close()

            // The app starts again: a new client and scheduler on the same file, the launch trigger.
            let store = try ClientFixture.openStore(at: path)
            let client = ClientFixture.client(store: store, server: server)
            let pulls = LockIsolated<[PullSummary]>([])
            let scheduler = SyncScheduler(clock: ImmediateClock()) { kind in
                let report = try await client.sync(full: kind == .full)
                pulls.withValue { $0.append(report.pull) }
            }
            await scheduler.connectivityChanged(online: true)
            try await scheduler.initialSync()
            #expect(pulls.value.map(\.requests) == [1])
            #expect(pulls.value.map(\.received) == [0])
            try await scheduler.run(for: .manual, kind: .full)
            #expect(pulls.value.last?.received == 3000, "asked for explicitly, a pull from scratch")
            await scheduler.stop()
        }
    }

    @Test("a device's own uploads do not come back: 5,501 pushed, none pulled; another device's writes, its edits of them included, all arrive")
    func ownUploadsStayUp() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let phoneClient = ClientFixture.client(store: phone, server: server)
            try await phone.database.write { db in
                for index in 0..<5501 {
                    try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES (?, 'steps', ?)", arguments: ["p-\(index)", index])
                }
            }
            let first = try await phoneClient.sync()
            #expect(first.upload.acknowledged == 5501)
            #expect(first.pull.received == 0, "the phone's own 5,501 changes stayed on the server")

            let watch = try ClientFixture.openStore(at: ClientFixture.storePath())
            let watchClient = ClientFixture.client(store: watch, server: server)
            #expect(try await watchClient.sync().pull.received == 5501, "another device gets them all")
            try await watch.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('w-1', 'run', 1)")
                try db.execute(sql: "UPDATE events SET value = -1 WHERE id = 'p-17'")
                try db.execute(sql: "DELETE FROM events WHERE id = 'p-18'")
            }
            try await phone.database.write { db in try db.execute(sql: "UPDATE events SET value = -2 WHERE id = 'p-19'") }
            #expect(try await watchClient.sync().pull.received == 0)
            let second = try await phoneClient.sync()
            #expect(second.pull.received == 3, "the watch's three changes, not the phone's own edit")
            let rows = try await phone.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, value FROM events WHERE id IN ('w-1', 'p-17', 'p-18', 'p-19') ORDER BY id")
                    .map { "\($0[0] as String)=\($0[1] as Int)" }
            }
            #expect(rows == ["p-17=-1", "p-19=-2", "w-1=1"])
            #expect(try await watchClient.sync().pull.received == 1, "the phone's edit reaches the watch")
        }
    }

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
