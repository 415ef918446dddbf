import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// DESIGN.md: every device converges to the server's state, including after an answer was
/// lost while another device wrote the same record.
@Suite("Lost answers", .timeLimit(.minutes(1)))
struct LostAnswerTests {
    static func row(_ sql: String, in store: FerryStore) async throws -> String? {
        try await store.database.read { db in try String.fetchOne(db, sql: sql) }
    }

    static func version(of entity: String, _ id: String, in store: FerryStore) async throws -> Int64? {
        try await store.database.read { db in
            try Int64.fetchOne(db, sql: "SELECT version FROM ferry_versions WHERE entity = ? AND entity_id = ?", arguments: [entity, id])
        }
    }

    @Test("an edit whose answer is lost while another device edits the same record: the device ends with the other's edit, as the server has it")
    func lostAnswerThenOtherDevice() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptop = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptopClient = ClientFixture.client(store: laptop, server: server)
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('r', 'steps', 1)") }
            try await ClientFixture.client(store: phone, server: server).sync()
            try await laptopClient.sync()

            try await phone.database.write { db in try db.execute(sql: "UPDATE events SET value = 2 WHERE id = 'r'") }
            let lossy = InterceptingTransport.losingAnswer(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {
                // The server has the phone's edit (version 2); the laptop edits on top of it.
                try await laptop.database.write { db in try db.execute(sql: "UPDATE events SET value = 3 WHERE id = 'r'") }
                try await laptopClient.sync()
            }
            try await ClientFixture.client(store: phone, server: server, transport: lossy).sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["events/r"]?.version == 3)
            #expect(remote["events/r"]?.data?["value"] == .integer(3))
            #expect(try await Self.row("SELECT value FROM events WHERE id = 'r'", in: phone) == "3", "the phone shows what the server holds")
            #expect(try await Self.version(of: "events", "r", in: phone) == 3)
        }
    }

    @Test("a conflict whose answer is lost still reaches the conflict policy, with the record as it is now")
    func lostConflict() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptop = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptopClient = ClientFixture.client(store: laptop, server: server)
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'first')") }
            try await ClientFixture.client(store: phone, server: server).sync()
            try await laptopClient.sync()
            try await laptop.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'laptop' WHERE id = 'n'") }
            try await laptopClient.sync()

            // The phone edits over version 1; the server holds version 2: a conflict, whose answer is lost.
            try await phone.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'phone' WHERE id = 'n'") }
            let lossy = InterceptingTransport.losingAnswer(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {
                try await laptop.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'laptop again' WHERE id = 'n'") }
                try await laptopClient.sync()
            }
            let report = try await ClientFixture.client(store: phone, server: server, transport: lossy).sync()

            #expect(report.upload.conflicts == 1, "the policy ran")
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["notes/n"]?.data?["body"] == .string("laptop again"))
            #expect(try await Self.row("SELECT body FROM notes WHERE id = 'n'", in: phone) == "laptop again")
            #expect(try await Self.version(of: "notes", "n", in: phone) == 3)
        }
    }

    @Test(
        "a crash with two batches on the server and neither answer applied: the resend learns both results, merges re-key, nothing is applied twice"
    )
    func twoBatchesResent() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            // Another device already has 50 of the samples, under its own ids.
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "watch",
                    mutations: (0..<50).map {
                        .upsert(id: Int64($0 + 1), entity: "events", entityID: "watch-\($0)", data: .value(0), naturalKey: "hk:\($0 * 4)")
                    }
                ),
                token: token
            )
            let path = ClientFixture.storePath()
            do {
                let store = try ClientFixture.openStore(at: path)
                try await store.database.write { db in
                    for index in 0..<200 {
                        try db.execute(sql: "INSERT INTO events (id, value, hk) VALUES (?, ?, ?)", arguments: ["e-\(index)", index, "hk:\(index)"])
                    }
                }
                // As the uploader does: the second batch is read and sent while the first answer
                // waits to be applied; then the process dies holding both answers.
                let lease = SyncLease(store: store, duration: 60)
                #expect(try await lease.acquire() == nil)
                let outbox = Outbox(store: store, lease: lease)
                let first = try #require(try await outbox.nextBatch(limit: 100))
                #expect(try await server.send(.POST, "/v1/push", token: token, body: first.requestBody()).status == 200)
                let second = try #require(try await outbox.nextBatch(limit: 100, inFlight: first.records))
                #expect(try await server.send(.POST, "/v1/push", token: token, body: second.requestBody()).status == 200)
                try await store.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [try deadProcessID()]) }
            }
            let reopened = try ClientFixture.openStore(at: path)
            let client = ClientFixture.client(store: reopened, server: server)
            let report = try await client.sync()
            #expect(report.upload.merged == 50, "the resend learned every merge")
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: token)
            #expect(remote.count == 200)
            #expect(remote.values.allSatisfy { $0.version <= 2 }, "a resent mutation was applied twice")
            let local = try await reopened.database.read { db in try String.fetchSet(db, sql: "SELECT id FROM events") }
            #expect(local == Set(remote.keys.map { String($0.dropFirst("events/".count)) }), "every merged record re-keyed to the server's id")
        }
    }

    /// A client that gives up at the first network error, so a lost answer ends the run.
    static func givingUp() -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.retry = RetryPolicy(maximumAttempts: 1)
        return configuration
    }

    @Test("a record whose creation was answered into the void, then deleted before the next sync: the delete reaches the server")
    func deleteAfterLostCreate() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('r', 1)") }
            let lossy = InterceptingTransport.losingAnswer(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {}
            await #expect(throws: FerryError.self) {
                try await ClientFixture.client(store: store, server: server, transport: lossy, configuration: Self.givingUp()).sync()
            }
            try await store.database.write { db in try db.execute(sql: "DELETE FROM events WHERE id = 'r'") }
            try await ClientFixture.client(store: store, server: server).sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["events/r"]?.op == .delete, "the server still has the record the device deleted")
            #expect(try await Self.row("SELECT id FROM events WHERE id = 'r'", in: store) == nil)
        }
    }

    @Test(
        "an edit whose answer was lost, then another edit: the second is sent over the first's version, not judged a conflict with the device's own write"
    )
    func editAfterLostEdit() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'zero')") }
            try await ClientFixture.client(store: store, server: server).sync()
            try await store.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'one' WHERE id = 'n'") }
            let lossy = InterceptingTransport.losingAnswer(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) {}
            await #expect(throws: FerryError.self) {
                try await ClientFixture.client(store: store, server: server, transport: lossy, configuration: Self.givingUp()).sync()
            }
            try await store.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'two' WHERE id = 'n'") }
            let report = try await ClientFixture.client(store: store, server: server).sync()
            #expect(report.upload.conflicts == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["notes/n"]?.data?["body"] == .string("two"))
            #expect(remote["notes/n"]?.version == 3)
            #expect(try await Self.row("SELECT body FROM notes WHERE id = 'n'", in: store) == "two")
        }
    }

    @Test(
        "a crash with a batch answered and the next read ahead, with a delete of a record the first created queued: after recovery the delete reaches the server"
    )
    func deleteReadAheadBeforeCrash() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let path = ClientFixture.storePath()
            do {
                let store = try ClientFixture.openStore(at: path)
                try await store.database.write { db in
                    try db.execute(sql: "INSERT INTO events (id, value) VALUES ('q', 0)")
                    try db.execute(sql: "DELETE FROM events WHERE id = 'q'")
                    try db.execute(sql: "INSERT INTO events (id, value) VALUES ('r', 1)")
                    for index in 0..<3 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["a-\(index)", index]) }
                    try db.execute(sql: "INSERT INTO events (id, value) VALUES ('f', 2)")
                    try db.execute(sql: "DELETE FROM events WHERE id = 'r'")
                }
                let lease = SyncLease(store: store, duration: 60)
                #expect(try await lease.acquire() == nil)
                let outbox = Outbox(store: store, lease: lease)
                // The first batch creates r and reaches the server; the next, read while it was on
                // the wire, stops before r's delete, which waits for the first answer; then the
                // process dies with neither answer applied.
                let first = try #require(try await outbox.nextBatch(limit: 6))
                #expect(first.records.contains(RecordRef(entity: "events", entityID: "r")))
                #expect(try await server.send(.POST, "/v1/push", token: token, body: first.requestBody()).status == 200)
                let second = try #require(try await outbox.nextBatch(limit: 6, inFlight: first.records))
                #expect(second.mutations.map(\.entityID) == ["f"], "a change of a record in flight waits for its answer")
                try await store.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [try deadProcessID()]) }
            }
            let reopened = try ClientFixture.openStore(at: path)
            let client = ClientFixture.client(store: reopened, server: server)
            try await client.sync()
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: token)
            #expect(remote["events/r"]?.op == .delete, "the device deleted r; the server must not keep it")
            #expect(remote.values.filter { $0.op == .upsert }.count == 4)
            #expect(try await Self.row("SELECT id FROM events WHERE id = 'r'", in: reopened) == nil)
        }
    }
}
