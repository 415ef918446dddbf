import Clocks
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// The client library in spaces (PROTOCOL.md, "Spaces"): tables placed in a space, read-only
/// writes refused in the app's transaction, revocation, and space management.
@Suite("Spaces on the client", .timeLimit(.minutes(2)))
struct SpaceClientTests {
    /// A team app: `projects` rows live in the space their `team_id` names, `aliases` in the
    /// company's read-only space, `notes` in the personal space.
    static let projects = SyncedTable(table: "projects", space: .column("team_id"))
    static let aliases = SyncedTable(table: "aliases", space: .named("company"))
    static let notes = SyncedTable(table: "notes")

    static func openStore(_ name: String) throws -> FerryStore {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, name TEXT);
                    CREATE TABLE aliases (id TEXT PRIMARY KEY NOT NULL, street TEXT);
                    CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
                    """
            )
        }
        let path = TestDirectory.make("spaces").appendingPathComponent("\(name).sqlite").path
        return try FerryStore(path: path, schema: migrator, tables: [projects, aliases, notes])
    }

    static func client(_ store: FerryStore, _ server: TestServer, user: String) -> FerryClient {
        FerryClient(
            store: store,
            transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
            token: { try await TestServer.token(for: user) },
            clock: ImmediateClock()
        )
    }

    @Test("pulled records land in their tables with the space column set; a write is pushed to its row's space")
    func spaceColumnWrittenByPull() async throws {
        try await TestServer.run { server in
            let dispatcher = Self.client(try Self.openStore("dispatcher"), server, user: "dispatcher")
            try await dispatcher.createSpace("team-1")
            try await dispatcher.setRole(.write, of: "worker", in: "team-1")
            #expect(try await dispatcher.members(of: "team-1").map(\.user) == ["dispatcher", "worker"])
            try await dispatcher.store.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('p1', 'team-1', 'Roof'), ('mine', NULL, 'Private')")
            }
            try await dispatcher.sync()
            let workerStore = try Self.openStore("worker")
            let worker = Self.client(workerStore, server, user: "worker")
            try await worker.sync()
            let rows = try await workerStore.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, team_id, name FROM projects ORDER BY id").map { [$0[0], $0[1], $0[2]] as [String?] }
            }
            #expect(rows == [["p1", "team-1", "Roof"]])
            #expect(await worker.status.spaces.withoutIncarnations == [Membership(space: "team-1", role: .write)])
            // The worker edits the shared project; the dispatcher gets it.
            try await workerStore.database.write { db in try db.execute(sql: "UPDATE projects SET name = 'Roof, north side' WHERE id = 'p1'") }
            try await worker.sync()
            try await dispatcher.sync()
            let name = try await dispatcher.store.database.read { db in try String.fetchOne(db, sql: "SELECT name FROM projects WHERE id = 'p1'") }
            #expect(name == "Roof, north side")
            // A row's space cannot change.
            await #expect(throws: DatabaseError.self) {
                try await workerStore.database.write { db in try db.execute(sql: "UPDATE projects SET team_id = NULL WHERE id = 'p1'") }
            }
        }
    }

    @Test("a write to a space the store knows as read-only fails in the app's transaction, naming the space and role; nothing is captured")
    func readOnlyWriteRefused() async throws {
        try await TestServer.run { server in
            let service = try await TestServer.token(for: "backend", service: true)
            #expect(try await server.createSpace("company", token: service).status == 201)
            #expect(try await server.grant(.read, to: "worker", in: "company", token: service).status == 200)
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "import",
                    mutations: (1...20).map {
                        Mutation(
                            id: $0,
                            entity: "aliases",
                            entityID: "a\($0)",
                            op: .upsert,
                            data: ["street": .string("Main \($0)")],
                            space: "company"
                        )
                    }
                ),
                token: service
            )
            let store = try Self.openStore("worker")
            let worker = Self.client(store, server, user: "worker")
            try await worker.sync()
            #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM aliases") } == 20)
            let before = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM ferry_outbox") }
            for statement in [
                "INSERT INTO aliases (id, street) VALUES ('x', 'y')", "UPDATE aliases SET street = 'z' WHERE id = 'a1'",
                "DELETE FROM aliases WHERE id = 'a2'",
            ] {
                do {
                    try await store.database.write { db in
                        try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n-\(statement.count)', 'in the same transaction')")
                        try db.execute(sql: statement)
                    }
                    Issue.record("\(statement) was allowed")
                } catch let error as DatabaseError {
                    #expect(error.message?.contains("space 'company'") == true && error.message?.contains("role read") == true, "\(error)")
                }
            }
            #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM ferry_outbox") } == before)
            #expect(
                try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM notes") } == 0,
                "the app's transaction rolled back whole"
            )
            await #expect(throws: FerryError.self) { try await store.enqueue(entity: "aliases", entityID: "q", op: .delete, space: "company") }
            try await worker.sync()
            #expect(try await store.database.read { db in try String.fetchOne(db, sql: "SELECT street FROM aliases WHERE id = 'a1'") } == "Main 1")
        }
    }

    @Test("revocation with an edit queued: the space's rows leave the store, the edit becomes a dead letter with the reason, nothing else is touched")
    func revocationWithQueuedEdit() async throws {
        try await TestServer.run { server in
            let dispatcher = Self.client(try Self.openStore("dispatcher"), server, user: "dispatcher")
            try await dispatcher.createSpace("team-1")
            try await dispatcher.createSpace("team-2")
            try await dispatcher.setRole(.write, of: "worker", in: "team-1")
            try await dispatcher.setRole(.write, of: "worker", in: "team-2")
            try await dispatcher.store.database.write { db in
                try db.execute(
                    sql:
                        "INSERT INTO projects (id, team_id, name) VALUES ('p1', 'team-1', 'Roof'), ('p2', 'team-1', 'Wall'), ('q1', 'team-2', 'Door')"
                )
            }
            try await dispatcher.sync()
            let store = try Self.openStore("worker")
            try await Self.client(store, server, user: "worker").sync()
            try await dispatcher.removeMember("worker", from: "team-1")
            // The worker edits p1 and writes a note while the run's upload is done and its pull
            // is on its way: the revocation finds the edit queued.
            let edit = InterceptingTransport.onFirstPull(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {
                try await store.database.write { db in
                    try db.execute(sql: "UPDATE projects SET name = 'Roof, done' WHERE id = 'p1'")
                    try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n1', 'mine')")
                }
            }
            let worker = FerryClient(store: store, transport: edit, token: { try await TestServer.token(for: "worker") }, clock: ImmediateClock())
            let pulled = try await worker.sync().pull
            #expect(pulled.spaces?.withoutIncarnations == [Membership(space: "team-2", role: .write)])
            let rows = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM projects ORDER BY id") }
            #expect(rows == ["q1"], "team-1's rows left; team-2's stayed")
            let dead = try await worker.deadLetters()
            #expect(dead.map(\.entityID) == ["p1"])
            #expect(dead.first?.reason.contains("team-1") == true && dead.first?.reason.contains("revoked") == true)
            let status = await worker.status
            #expect(status.deadLettered == 1 && status.spaces.map(\.space) == ["team-2"])
            let snapshot = try await worker.queueSnapshot()
            #expect(snapshot.deadLetters.contains { $0.reason.contains("revoked") }, "\(snapshot)")
            let journal = try await worker.journal.events()
            #expect(journal.contains { $0.kind == .spaceRevoked && $0.details["space"] == "team-1" && $0.details["deadLettered"] == "1" })
            // The note still goes up; nothing of team-1 does.
            try await worker.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "worker"))
            #expect(remote["notes/n1"] != nil)
            let dispatchers = try await server.pullAll(token: try await TestServer.token(for: "dispatcher"))
            #expect(dispatchers["team-1:projects/p1"]?.data?["name"] == .string("Roof"))
        }
    }

    @Test("a record the app deleted while its space was revoked comes back whole with a re-grant (found by the space fault schedules, seed 166)")
    func regrantBringsBackWhatWasDeletedWhileRevoked() async throws {
        try await TestServer.run { server in
            let dispatcher = Self.client(try Self.openStore("dispatcher"), server, user: "dispatcher")
            try await dispatcher.createSpace("team-1")
            try await dispatcher.setRole(.write, of: "worker", in: "team-1")
            try await dispatcher.store.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('p1', 'team-1', 'Roof'), ('p2', 'team-1', 'Wall')")
            }
            try await dispatcher.sync()
            let store = try Self.openStore("worker")
            let worker = Self.client(store, server, user: "worker")
            try await worker.sync()
            try await dispatcher.removeMember("worker", from: "team-1")
            try await store.database.write { db in try db.execute(sql: "DELETE FROM projects WHERE id = 'p1'") }
            try await worker.sync()
            #expect(try await worker.deadLetters().map(\.entityID) == ["p1"], "the delete was refused: no longer a member")
            try await dispatcher.setRole(.write, of: "worker", in: "team-1")
            try await worker.sync()
            let rows = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM projects ORDER BY id") }
            #expect(rows == ["p1", "p2"], "the re-grant brings the space whole, p1 included")
        }
    }

    @Test(
        "a space's record never takes over a row of another space: someone who adds you to their space cannot overwrite or capture your own records"
    )
    func spaceRecordsCannotTakeOverRows() async throws {
        try await TestServer.run { server in
            let store = try Self.openStore("alice")
            let alice = Self.client(store, server, user: "alice")
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('p1', NULL, 'mine')")
            }
            try await alice.sync()
            // Carol makes a space with a record of the same id, and of an entity Alice keeps in another space, and adds Alice.
            let carol = try await TestServer.token(for: "carol")
            #expect(try await server.createSpace("evil", token: carol).status == 201)
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "carol",
                    mutations: [
                        Mutation(id: 1, entity: "projects", entityID: "p1", op: .upsert, data: ["name": .string("carol's")], space: "evil"),
                        Mutation(id: 2, entity: "aliases", entityID: "a1", op: .upsert, data: ["street": .string("x")], space: "evil"),
                        Mutation(id: 3, entity: "projects", entityID: "p2", op: .upsert, data: ["name": .string("shared")], space: "evil"),
                    ]
                ),
                token: carol
            )
            #expect(try await server.grant(.write, to: "alice", in: "evil", token: carol).status == 200)
            try await alice.sync()
            let rows = try await store.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, team_id, name FROM projects ORDER BY id").map {
                    "\($0[0] as String):\(($0[1] as String?) ?? "-"):\($0[2] as String)"
                }
            }
            #expect(rows == ["p1:-:mine", "p2:evil:shared"], "Alice's own p1 stays hers; Carol's p2 arrives")
            #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM aliases") } == 0)
            let setAside = try await alice.queueSnapshot().setAside
            // a1 has no table for its space; p1 is known here at its version (the store knows a
            // record by entity and id), or set aside if it were newer: never written over Alice's.
            #expect(setAside.map(\.entityID).contains("a1") && !setAside.contains { $0.entityID == "p2" }, "\(setAside)")
            // Her edit of p1 goes to her personal space, not Carol's.
            try await store.database.write { db in try db.execute(sql: "UPDATE projects SET name = 'still mine' WHERE id = 'p1'") }
            try await alice.sync()
            let carols = try await server.pullAll(token: carol)
            #expect(carols["evil:projects/p1"]?.data?["name"] == .string("carol's"))
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice"))["projects/p1"]?.data?["name"] == .string("still mine"))
        }
    }

    @Test(
        "a page written many rows to a statement meets a row of another space under one of its ids: that record is set aside, every other arrives"
    )
    func manyRowWriteMeetsRowOfAnotherSpace() async throws {
        try await TestServer.run { server in
            let store = try Self.openStore("alice")
            let alice = Self.client(store, server, user: "alice")
            // A personal row the store holds without a version or a queued change (written uncaptured), under an id Carol's space uses.
            try await store.database.write { db in
                try FerryStore.withoutCapture(db) { try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('p3', NULL, 'mine')") }
            }
            let carol = try await TestServer.token(for: "carol")
            #expect(try await server.createSpace("crew", token: carol).status == 201)
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "carol",
                    mutations: (1...9).map {
                        Mutation(
                            id: Int64($0),
                            entity: "projects",
                            entityID: "p\($0)",
                            op: .upsert,
                            data: ["name": .string("crew \($0)")],
                            space: "crew"
                        )
                    }
                ),
                token: carol
            )
            #expect(try await server.grant(.read, to: "alice", in: "crew", token: carol).status == 200)
            let report = try await alice.sync()
            let rows = try await store.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, team_id, name FROM projects ORDER BY id").map {
                    "\($0[0] as String):\(($0[1] as String?) ?? "-"):\($0[2] as String)"
                }
            }
            #expect(rows == ["p1:crew:crew 1", "p2:crew:crew 2", "p3:-:mine"] + (4...9).map { "p\($0):crew:crew \($0)" })
            #expect(report.pull.setAside == 1)
            #expect(try await alice.queueSnapshot().setAside.map(\.entityID) == ["p3"])
        }
    }

    @Test(
        "a record this device wrote into a space before joining it, deleted by another member in between, leaves the store when the join is whole (second review)"
    )
    func joinRemovesWhatOthersDeletedBefore() async throws {
        try await TestServer.run { server in
            let store = try Self.openStore("worker")
            let worker = Self.client(store, server, user: "worker")
            try await worker.sync()
            try await worker.createSpace("crew")
            try await worker.setRole(.write, of: "bob", in: "crew")
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('x', 'crew', 'ladder'), ('y', 'crew', 'rope')")
            }
            // The push goes out; before the run's pull, Bob deletes x.
            let bobDeletes = InterceptingTransport.onFirstPull(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {
                _ = try await server.pushOK(
                    PushRequest(clientID: "bob", mutations: [Mutation(id: 1, entity: "projects", entityID: "x", op: .delete, space: "crew")]),
                    token: try await TestServer.token(for: "bob")
                )
            }
            let client = FerryClient(
                store: store,
                transport: bobDeletes,
                token: { try await TestServer.token(for: "worker") },
                clock: ImmediateClock()
            )
            try await client.sync()
            let rows = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM projects ORDER BY id") }
            #expect(rows == ["y"], "x was deleted by Bob before this device's pull joined the space")
            #expect(try await client.sync().pull.received == 0)
        }
    }
}
