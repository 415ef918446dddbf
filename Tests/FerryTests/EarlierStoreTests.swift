import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// A store written at each of Ferry's store migrations (`ferry-v1` onwards) opens, migrates,
/// syncs its queue and keeps its rows: an app updated after years finds its data.
///
/// The fixtures are `Tests/Fixtures/Stores/ferry-vN.sql`, SQL dumps frozen when that migration
/// was the newest; a release with a new store migration records its own
/// (`FERRY_RECORD_FIXTURES=1 swift test --filter EarlierStoreTests`, which needs `sqlite3`) and
/// never rewrites an earlier one.
@Suite("Stores of every earlier version", .timeLimit(.minutes(2)))
struct EarlierStoreTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/Stores")

    /// Every fixture, oldest first.
    static var fixtures: [String] {
        (1...StoreSchema.migrator.migrations.count).map { "ferry-v\($0)" }
    }

    @Test("a store of each earlier migration opens, syncs what it queued, and keeps what it held", arguments: fixtures)
    func opensAndSyncs(version: String) async throws {
        let fixture = Self.folder.appendingPathComponent("\(version).sql")
        let sql = try #require(try? String(contentsOf: fixture, encoding: .utf8), "\(fixture.path) is missing: record it (see EarlierStoreTests)")
        try await TestServer.run { server in
            // The server holds what the store had pulled: e1, e2 and e3 at version 1.
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "before",
                    mutations: (1...3).map {
                        .upsert(id: Int64($0), entity: "events", entityID: "e\($0)", data: ["kind": .string("old"), "value": .integer(Int64($0))])
                    }
                ),
                token: token
            )
            let path = ClientFixture.storePath()
            let queue = try DatabaseQueue(path: path)
            try await queue.writeWithoutTransaction { db in try db.execute(sql: sql) }
            try queue.close()

            let store = try ClientFixture.openStore(at: path)
            let client = ClientFixture.client(store: store, server: server)
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 3, "e2's edit, e3's deletion and e4")
            #expect(try await client.deadLetters().isEmpty)
            #expect(await client.status.pending == 0)
            // Rows are not Sendable: read as values, with the async read.
            let rows = try await store.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, value FROM events ORDER BY id").map { ($0["id"] as String, $0["value"] as Int) }
            }
            #expect(rows.map(\.0) == ["e1", "e2", "e4"])
            #expect(rows.map(\.1) == [1, 20, 4])
            let held = try await server.pullAll(token: token)
            #expect(Set(held.filter { $0.value.op == .upsert }.keys) == ["events/e1", "events/e2", "events/e4"])
            #expect(held["events/e2"]?.data?["value"] == .integer(20))
            // And the store goes on capturing.
            try await store.database.write { db in try db.execute(sql: "UPDATE events SET value = 5 WHERE id = 'e4'") }
            #expect(try await client.sync().upload.acknowledged == 1)
            await client.stop()
            try await store.close()
        }
    }

    /// Writes the fixture of the newest migration, and of any earlier one missing: what a
    /// store at that migration held after pulling e1, e2, e3 at version 1, then queueing an
    /// edit of e2, the deletion of e3 and a new e4, as the outbox of that version kept them.
    @Test(
        "record the store fixtures (FERRY_RECORD_FIXTURES=1)",
        .enabled(if: ProcessInfo.processInfo.environment["FERRY_RECORD_FIXTURES"] == "1")
    )
    func record() throws {
        try FileManager.default.createDirectory(at: Self.folder, withIntermediateDirectories: true)
        for version in Self.fixtures {
            let fixture = Self.folder.appendingPathComponent("\(version).sql")
            guard !FileManager.default.fileExists(atPath: fixture.path) else { continue }  // frozen
            let path = ClientFixture.storePath()
            let queue = try DatabaseQueue(path: path)
            try StoreSchema.migrator.migrate(queue, upTo: version)
            try ClientFixture.schema().migrate(queue)
            try queue.write { db in
                for id in 1...3 {
                    try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES (?, 'old', ?)", arguments: ["e\(id)", id])
                    try db.execute(sql: "INSERT INTO ferry_versions (entity, entity_id, version) VALUES ('events', ?, 1)", arguments: ["e\(id)"])
                }
                try db.execute(sql: "UPDATE events SET value = 20 WHERE id = 'e2'; DELETE FROM events WHERE id = 'e3'")
                try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('e4', 'new', 4)")
                let queued: [(String, String, String?)] = [
                    ("e2", "upsert", #"{"hk":null,"id":"e2","kind":"old","value":20}"#), ("e3", "delete", nil),
                    ("e4", "upsert", #"{"hk":null,"id":"e4","kind":"new","value":4}"#),
                ]
                for (id, op, data) in queued {
                    try db.execute(
                        sql: "INSERT INTO ferry_outbox (entity, entity_id, op, data, state) VALUES ('events', ?, ?, ?, 0)",
                        arguments: [id, op, data]
                    )
                }
            }
            try queue.close()
            let dump = Process()
            dump.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
            dump.arguments = [path, ".dump"]
            let output = Pipe()
            dump.standardOutput = output
            try dump.run()
            let sql = output.fileHandleForReading.readDataToEndOfFile()
            dump.waitUntilExit()
            try #require(dump.terminationStatus == 0)
            try sql.write(to: fixture)
        }
    }
}
