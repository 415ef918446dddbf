import FerryProtocol
import FerryTestSupport
import FerryTesting
import Foundation
import GRDB
import Testing

@testable import Ferry

/// Conflict detection where records meet in less obvious ways: two devices creating the same
/// natural key, a stale delete, and a record too large to send edited again and again.
@Suite("Conflict cases", .timeLimit(.minutes(2)))
struct ConflictCaseTests {
    /// Samples keyed by `hk`, unique locally as the app's own index says, with conflict detection.
    static let samples = SyncedTable(table: "samples", naturalKey: "hk", detectsConflicts: true)

    static func openSampleStore() throws -> FerryStore {
        var schema = DatabaseMigrator()
        schema.registerMigration("app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE samples (id TEXT PRIMARY KEY NOT NULL, hk TEXT, value INTEGER);
                    CREATE UNIQUE INDEX samples_by_hk ON samples (hk);
                    """
            )
        }
        return try FerryStore(path: ClientFixture.storePath(), schema: schema, tables: [samples])
    }

    static func samples(in store: FerryStore) async throws -> [String: Int] {
        try await store.database.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, value FROM samples").map { ($0[0] as String, $0[1] as Int) })
        }
    }

    static func configuration(_ policy: ConflictPolicy) -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.conflictPolicy = policy
        return configuration
    }

    @Test(
        "phone and watch create the same natural key under conflict detection: one record everywhere, the UNIQUE index holds, the policy decides",
        arguments: ["server", "client"]
    )
    func sameNaturalKeyOnTwoDevices(winner: String) async throws {
        try await TestServer.run { server in
            let policy: ConflictPolicy = winner == "server" ? .serverWins : .clientWins
            let phone = try Self.openSampleStore()
            let watch = try Self.openSampleStore()
            let phoneClient = ClientFixture.client(store: phone, server: server, configuration: Self.configuration(policy))
            let watchClient = ClientFixture.client(store: watch, server: server, configuration: Self.configuration(policy))
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO samples (id, hk, value) VALUES ('p1', 'K', 1)") }
            try await watch.database.write { db in try db.execute(sql: "INSERT INTO samples (id, hk, value) VALUES ('w1', 'K', 2)") }
            try await phoneClient.sync()
            let report = try await watchClient.sync()
            #expect(report.upload.conflicts == 1)
            try await phoneClient.sync()
            try await watchClient.sync()

            let expected = winner == "server" ? 1 : 2
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.filter { $0.value.op == .upsert }.keys.sorted() == ["samples/p1"], "one live record on the server: \(remote)")
            #expect(remote["samples/p1"]?.data?["value"] == .integer(Int64(expected)))
            #expect(try await Self.samples(in: watch) == ["p1": expected], "no phantom record on the watch")
            #expect(try await Self.samples(in: phone) == ["p1": expected])
            #expect(await watchClient.status.pending == 0)
            #expect(try await watchClient.deadLetters().isEmpty)
        }
    }

    @Test("a record synced under its own id that takes a key another record holds, under conflict detection: its own id goes everywhere")
    func syncedRecordTakesAnotherKey() async throws {
        try await TestServer.run { server in
            let phone = try Self.openSampleStore()
            let watch = try Self.openSampleStore()
            let phoneClient = ClientFixture.client(store: phone, server: server)
            let watchClient = ClientFixture.client(store: watch, server: server)
            // The watch syncs its record before the phone's exists, then gives it the phone's key.
            try await watch.database.write { db in try db.execute(sql: "INSERT INTO samples (id, hk, value) VALUES ('w1', 'L', 2)") }
            try await watchClient.sync()
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO samples (id, hk, value) VALUES ('p1', 'K', 1)") }
            try await phoneClient.sync()
            try await watch.database.write { db in try db.execute(sql: "UPDATE samples SET hk = 'K' WHERE id = 'w1'") }
            try await watchClient.sync()
            try await phoneClient.sync()
            try await watchClient.sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.filter { $0.value.op == .upsert }.keys.sorted() == ["samples/p1"], "\(remote)")
            #expect(remote["samples/w1"]?.op == .delete, "the watch's own record goes, as a merge would delete it")
            #expect(try await Self.samples(in: watch) == ["p1": 1])
            #expect(try await Self.samples(in: phone) == ["p1": 1])
        }
    }

    @Test("a stale delete under conflict detection reaches the policy instead of silently beating another device's edit", arguments: [false, true])
    func staleDelete(deleteWins: Bool) async throws {
        try await TestServer.run { server in
            let policy = ConflictPolicy { conflict in
                // The documented "latest wins" shape for an edit against a delete: here, the delete wins only when told.
                deleteWins ? .keep(conflict.local) : .acceptServer
            }
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptop = try ClientFixture.openStore(at: ClientFixture.storePath())
            let phoneClient = ClientFixture.client(store: phone, server: server, configuration: Self.configuration(policy))
            let laptopClient = ClientFixture.client(store: laptop, server: server, configuration: Self.configuration(policy))
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'first')") }
            try await phoneClient.sync()
            try await laptopClient.sync()
            try await laptop.database.write { db in try db.execute(sql: "UPDATE notes SET body = 'edited' WHERE id = 'n'") }
            try await laptopClient.sync()
            try await phone.database.write { db in try db.execute(sql: "DELETE FROM notes WHERE id = 'n'") }
            let report = try await phoneClient.sync()
            #expect(report.upload.conflicts == 1, "the policy saw the delete")
            try await laptopClient.sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            let body = { (store: FerryStore) in
                try await store.database.read { db in try String.fetchOne(db, sql: "SELECT body FROM notes WHERE id = 'n'") }
            }
            if deleteWins {
                #expect(remote["notes/n"]?.op == .delete)
                #expect(try await body(phone) == nil)
                #expect(try await body(laptop) == nil)
            } else {
                #expect(remote["notes/n"]?.data?["body"] == .string("edited"))
                #expect(try await body(phone) == "edited", "the phone takes the edit back")
                #expect(try await body(laptop) == "edited")
            }
        }
    }

    @Test("101 autosaves of a document too large to send leave one dead letter, holding the newest edit")
    func oneDeadLetterPerRecord() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            for save in 0..<101 {
                let text = "save \(save) " + String(repeating: "x", count: 300_000)
                try await store.database.write { db in
                    try db.execute(sql: "INSERT OR REPLACE INTO events (id, kind) VALUES ('doc', ?)", arguments: [text])
                    try db.execute(sql: "INSERT OR REPLACE INTO events (id, value) VALUES (?, ?)", arguments: ["small-\(save)", save])
                }
                // A sync now and then: the saves between two syncs are coalesced, and each sync replaces the dead letter.
                if save % 10 == 0 { try await client.sync() }
            }
            let dead = try await client.deadLetters()
            #expect(dead.count == 1)
            #expect(dead.first?.entityID == "doc")
            let data = try await store.database.read { db in
                try String.fetchOne(db, sql: "SELECT data FROM ferry_outbox WHERE state = 2")
            }
            #expect(data?.contains("save 100 ") == true, "the newest edit is the one kept")
            #expect(await client.status.deadLettered == 1)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 101)
        }
    }

    /// One device edits a note while another deletes it; `arrivesFirst` reaches the server
    /// first, `madeLater` was made later by its device's clock (set on its queued change, as
    /// that device's clock would have). Under `.latestChangeWins` the later change wins
    /// everywhere, whichever arrives first: a delete's time is on the server's tombstone.
    @Test(
        "edit versus delete under latestChangeWins: the later change wins everywhere, in either order of arrival",
        arguments: [("edit", "edit"), ("edit", "delete"), ("delete", "edit"), ("delete", "delete")]
    )
    func editVersusDelete(arrivesFirst: String, madeLater: String) async throws {
        try await TestServer.run { server in
            let configuration = Self.configuration(.latestChangeWins)
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let watch = try ClientFixture.openStore(at: ClientFixture.storePath())
            let phoneClient = ClientFixture.client(store: phone, server: server, configuration: configuration)
            let watchClient = ClientFixture.client(store: watch, server: server, configuration: configuration)
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'v1')") }
            try await phoneClient.sync()
            try await watchClient.sync()

            let now = Date().timeIntervalSince1970
            let editAt = madeLater == "edit" ? now + 10 : now
            let deleteAt = madeLater == "delete" ? now + 10 : now
            try await phone.database.write { db in
                try db.execute(sql: "UPDATE notes SET body = 'v2' WHERE id = 'n'")
                try db.execute(sql: "UPDATE ferry_outbox SET queued_at = ?", arguments: [editAt])
            }
            try await watch.database.write { db in
                try db.execute(sql: "DELETE FROM notes WHERE id = 'n'")
                try db.execute(sql: "UPDATE ferry_outbox SET queued_at = ?", arguments: [deleteAt])
            }
            let (first, second) = arrivesFirst == "edit" ? (phoneClient, watchClient) : (watchClient, phoneClient)
            try await first.sync()
            #expect(try await second.sync().upload.conflicts == 1)
            try await first.sync()
            try await second.sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))["notes/n"]
            let bodies = { (store: FerryStore) in
                try await store.database.read { db in try String.fetchAll(db, sql: "SELECT body FROM notes WHERE id = 'n'") }
            }
            if madeLater == "edit" {
                #expect(remote?.op == .upsert && remote?.data?["body"] == .string("v2"), "the later edit wins: \(String(describing: remote))")
                #expect(try await bodies(phone) == ["v2"])
                #expect(try await bodies(watch) == ["v2"])
            } else {
                #expect(remote?.op == .delete, "the later delete wins: \(String(describing: remote))")
                #expect(try await bodies(phone).isEmpty)
                #expect(try await bodies(watch).isEmpty)
            }
            #expect(await phoneClient.status.pending == 0)
            #expect(await watchClient.status.pending == 0)
        }
    }

    @Test("a change sent again after its request failed still carries its last edit's time, not its first's")
    func resendKeepsTheLastEditsTime() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let now = Date().timeIntervalSince1970
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n', 'first')")
                try db.execute(sql: "UPDATE ferry_outbox SET queued_at = ?", arguments: [now - 60])
                try db.execute(sql: "UPDATE notes SET body = 'second' WHERE id = 'n'")
                try db.execute(sql: "UPDATE ferry_outbox SET queued_at = ? WHERE queued_at > ?", arguments: [now, now - 30])
            }
            let transport = FaultInjectingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!), faults: .none)
            transport.inject(.reset, intoNext: "/v1/push")  // the first send never reaches the server: sent again
            try await ClientFixture.client(store: phone, server: server, transport: transport).sync()

            let token = try await TestServer.token(for: "alice")
            let answer = try await server.pushOK(
                PushRequest(clientID: "watch", mutations: [.upsert(id: 1, entity: "notes", entityID: "n", data: [:], baseVersion: 0)]),
                token: token
            )
            #expect(answer.results.first?.status == .conflict)
            #expect(answer.results.first?.current?.changedAt == Int64((now * 1000).rounded()), "the second edit's time")
        }
    }
}
