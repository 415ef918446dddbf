import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// PROTOCOL.md, "Versions": a later server may add statuses, ops and roles within the major
/// version; a value this client does not know affects that one result, never the whole answer.
@Suite("A later server's values", .timeLimit(.minutes(1)))
struct TolerantDecodingTests {
    /// Rewrites the JSON of every answer to `path` with `rewrite`.
    static func rewriting(_ server: TestServer, _ path: String, _ rewrite: @escaping @Sendable (inout [String: Any]) -> Void) -> InterceptingTransport
    {
        InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
            var response = try await next(request)
            guard request.path.hasPrefix(path), response.status == 200,
                var object = try JSONSerialization.jsonObject(with: response.body) as? [String: Any]
            else { return response }
            rewrite(&object)
            response.body = try JSONSerialization.data(withJSONObject: object)
            return response
        }
    }

    @Test("a result with a status this version does not know is a dead letter with its payload; the batch's other results are used")
    func unknownStatus() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for id in ["a", "b", "c"] { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 7)", arguments: [id]) }
            }
            let transport = Self.rewriting(server, Endpoint.push) { object in
                guard var results = object["results"] as? [[String: Any]] else { return }
                results[1]["status"] = "deferred"
                results[1]["reason"] = "a field of a later version"
                object["results"] = results
            }
            let client = ClientFixture.client(store: store, server: server, transport: transport)
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 2)
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["b"])
            #expect(dead.first?.reason.contains("\"deferred\"") == true)
            #expect(await client.status.pending == 0)
            // The row stays as the app wrote it.
            #expect(try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT value FROM events WHERE id = 'b'") } == 7)
            await client.stop()
            try await store.close()
        }
    }

    @Test(
        "a pulled change with an op this version does not know is left out and journaled, the page's others written; a later version pulls it again"
    )
    func unknownOp() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "other",
                    mutations: (1...3).map { .upsert(id: Int64($0), entity: "events", entityID: "e\($0)", data: ["value": .integer(Int64($0))]) }
                ),
                token: token
            )
            let transport = Self.rewriting(server, Endpoint.pull) { object in
                guard var changes = object["changes"] as? [[String: Any]], changes.count == 3 else { return }
                changes[0]["op"] = "archive"
                object["changes"] = changes
            }
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server, transport: transport)
            let report = try await client.sync()
            #expect(report.pull.received == 2)
            let ids = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM events ORDER BY id") }
            #expect(ids == ["e2", "e3"])
            let lines = try await client.journal.events().filter { $0.kind == .unrecognized }
            #expect(lines.count == 1)
            #expect(lines.first?.message.contains("events/e1") == true)
            #expect(lines.first?.message.contains("\"archive\"") == true)
            let leftOutBy = { try await store.database.read { db in try String.fetchOne(db, sql: "SELECT left_out_by FROM ferry_meta") } }
            #expect(try await leftOutBy() == ProtocolVersion.current.description, "noted with the cursor that moved past it")
            try await client.sync()
            #expect(
                try await client.journal.events().filter { $0.kind == .pullRestarted }.isEmpty,
                "the same version gains nothing from pulling again"
            )
            await client.stop()

            // The app is updated to a version that knows the op: as if 1.0 had left it out.
            try await store.database.write { db in try db.execute(sql: "UPDATE ferry_meta SET left_out_by = '1.0'") }
            let updated = ClientFixture.client(store: store, server: server)
            try await updated.sync()
            let after = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM events ORDER BY id") }
            #expect(after == ["e1", "e2", "e3"])
            #expect(try await leftOutBy() == nil)
            let restarted = try await updated.journal.events().filter { $0.kind == .pullRestarted }
            #expect(restarted.count == 1 && restarted.first?.message.contains("protocol 1.0") == true)
            await updated.stop()
            try await store.close()
        }
    }

    @Test("a pull from scratch keeps a record whose change it left out: the server still holds it")
    func leftOutKeptBySweep() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "other",
                    mutations: (1...3).map { .upsert(id: Int64($0), entity: "events", entityID: "e\($0)", data: ["value": .integer(Int64($0))]) }
                ),
                token: token
            )
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await ClientFixture.client(store: store, server: server).sync()
            let transport = Self.rewriting(server, Endpoint.pull) { object in
                guard var changes = object["changes"] as? [[String: Any]],
                    let index = changes.firstIndex(where: { $0["entityID"] as? String == "e1" })
                else { return }
                changes[index]["op"] = "archive"
                object["changes"] = changes
            }
            let client = ClientFixture.client(store: store, server: server, transport: transport)
            try await client.sync(full: true)
            let ids = try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM events ORDER BY id") }
            #expect(ids == ["e1", "e2", "e3"], "e1 was not brought, but it was named: the sweep keeps it")
            await client.stop()
            try await store.close()
        }
    }

    @Test("a role this version does not know is kept as the server spelled it, in a pull's memberships and in the space lists")
    func unknownRoleDecoded() async throws {
        let commenter = SpaceRole(tolerating: "commenter")
        #expect(!commenter.isKnown && commenter.canWrite && SpaceRole(rawValue: "commenter") == nil)
        let page = Data(#"{"changes":[],"cursor":"c","hasMore":false,"spaces":[{"space":"team","role":"commenter"}],"revoked":[]}"#.utf8)
        #expect(try PullResponse.decode(from: page).spaces == [Membership(space: "team", role: commenter)])
        let list = Data(#"{"spaces":[{"space":"team","role":"commenter","incarnation":"i"},{"space":"mine","role":"admin"}]}"#.utf8)
        #expect(
            try JSONDecoder().decode(SpaceList.self, from: list).spaces == [
                Membership(space: "team", role: commenter, incarnation: "i"), Membership(space: "mine", role: .admin),
            ]
        )
        let members = Data(#"{"members":[{"user":"bob","role":"owner"}]}"#.utf8)
        #expect(try JSONDecoder().decode(MemberList.self, from: members).members == [SpaceMember(user: "bob", role: SpaceRole(tolerating: "owner"))])
        // What this version sends is still one of the roles it knows.
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(RoleRequest.self, from: Data(#"{"role":"owner"}"#.utf8)) }
        #expect(String(decoding: try JSONEncoder().encode(RoleRequest(role: .write)), as: UTF8.self) == #"{"role":"write"}"#)
    }

    @Test("a member whose role this version does not know writes to the space and the server decides; the store keeps the role as named")
    func unknownRoleLeftToTheServer() async throws {
        try await TestServer.run { server in
            let dispatcher = SpaceClientTests.client(try SpaceClientTests.openStore("dispatcher"), server, user: "dispatcher")
            try await dispatcher.createSpace("team-1")
            try await dispatcher.setRole(.write, of: "worker", in: "team-1")
            // A later server names the worker's role "editor", which this version does not know.
            let transport = Self.rewriting(server, Endpoint.pull) { object in
                guard var spaces = object["spaces"] as? [[String: Any]] else { return }
                for index in spaces.indices where spaces[index]["space"] as? String == "team-1" { spaces[index]["role"] = "editor" }
                object["spaces"] = spaces
            }
            let store = try SpaceClientTests.openStore("worker")
            let worker = FerryClient(
                store: store,
                transport: transport,
                token: { try await TestServer.token(for: "worker") },
                clock: ImmediateClock()
            )
            try await worker.sync()
            #expect(await worker.status.spaces.map(\.role.rawValue) == ["editor"])
            #expect(try await store.database.read { db in try String.fetchOne(db, sql: "SELECT role FROM ferry_spaces") } == "editor")
            try await store.database.write { db in try db.execute(sql: "INSERT INTO projects (id, team_id, name) VALUES ('p1', 'team-1', 'Roof')") }
            let report = try await worker.sync()
            #expect(report.upload.acknowledged == 1, "the guard left the write to the server, which took it")
            #expect(try await worker.deadLetters().isEmpty)
            try await dispatcher.sync()
            #expect(
                try await dispatcher.store.database.read { db in try String.fetchOne(db, sql: "SELECT name FROM projects WHERE id = 'p1'") } == "Roof"
            )
            await worker.stop()
            try await store.close()
        }
    }
}
