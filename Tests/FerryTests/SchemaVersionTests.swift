import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// Devices on two versions of an app write side by side: v2 renamed the column `value` to
/// `amount` and added `unit`. No version erases a field it does not know.
@Suite("App versions side by side", .timeLimit(.minutes(1)))
struct SchemaVersionTests {
    static func schema(version: Int) -> DatabaseMigrator {
        var schema = DatabaseMigrator()
        schema.registerMigration("app-v1") { db in
            try db.execute(sql: "CREATE TABLE samples (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER)")
        }
        if version >= 2 {
            schema.registerMigration("app-v2") { db in
                try db.execute(sql: "ALTER TABLE samples RENAME COLUMN value TO amount; ALTER TABLE samples ADD COLUMN unit TEXT")
            }
        }
        return schema
    }

    /// A store of app version `version`; v2 maps `amount` to the old field when `keepsFieldName`.
    static func store(version: Int, keepsFieldName: Bool = false, at path: String = ClientFixture.storePath()) throws -> FerryStore {
        let table = SyncedTable(table: "samples", fieldNames: version >= 2 && keepsFieldName ? ["amount": "value"] : [:])
        return try FerryStore(path: path, schema: schema(version: version), tables: [table])
    }

    static func row(_ id: String, in store: FerryStore) async throws -> [String: String] {
        try await store.database.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM samples WHERE id = ?", arguments: [id]) else { return [:] }
            var values: [String: String] = [:]
            for column in row.columnNames { values[column] = row[column].map { "\($0)" } ?? "NULL" }
            return values
        }
    }

    @Test("a field a device's columns do not hold survives its edits: v1's value through a v2 device that renamed it, v2's unit through a v1 device")
    func unknownFieldsSurvive() async throws {
        try await TestServer.run { server in
            let v1 = try Self.store(version: 1)
            let v2 = try Self.store(version: 2)
            let v1Client = ClientFixture.client(store: v1, server: server)
            let v2Client = ClientFixture.client(store: v2, server: server)
            try await v1.database.write { db in try db.execute(sql: "INSERT INTO samples (id, kind, value) VALUES ('s', 'steps', 5)") }
            try await v1Client.sync()
            try await v2Client.sync()
            #expect(try await Self.row("s", in: v2)["amount"] == "NULL", "v2 does not know the field value")

            try await v2.database.write { db in try db.execute(sql: "UPDATE samples SET kind = 'walk', unit = 'count' WHERE id = 's'") }
            try await v2Client.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(
                remote["samples/s"]?.data?["value"] == .integer(5),
                "v2's edit did not erase v1's value: \(String(describing: remote["samples/s"]))"
            )
            #expect(remote["samples/s"]?.data?["unit"] == .string("count"))

            try await v1Client.sync()
            try await v1.database.write { db in try db.execute(sql: "UPDATE samples SET value = 6 WHERE id = 's'") }
            try await v1Client.sync()
            let after = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(after["samples/s"]?.data?["unit"] == .string("count"), "v1's edit did not erase v2's unit")
            #expect(after["samples/s"]?.data?["value"] == .integer(6))
            #expect(after["samples/s"]?.data?["kind"] == .string("walk"))
            try await v2Client.sync()
            #expect(try await Self.row("s", in: v2)["unit"] == "count")
        }
    }

    @Test("the supported rename: v2 maps its column amount to the field value, and v1 and v2 devices read and write the same field")
    func renamedColumnKeepsItsField() async throws {
        try await TestServer.run { server in
            let v1 = try Self.store(version: 1)
            let v2 = try Self.store(version: 2, keepsFieldName: true)
            let v1Client = ClientFixture.client(store: v1, server: server)
            let v2Client = ClientFixture.client(store: v2, server: server)
            try await v1.database.write { db in try db.execute(sql: "INSERT INTO samples (id, kind, value) VALUES ('s', 'steps', 5)") }
            try await v1Client.sync()
            try await v2Client.sync()
            #expect(try await Self.row("s", in: v2)["amount"] == "5")
            try await v2.database.write { db in try db.execute(sql: "UPDATE samples SET amount = 7 WHERE id = 's'") }
            try await v2Client.sync()
            try await v1Client.sync()
            #expect(try await Self.row("s", in: v1)["value"] == "7")
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["samples/s"]?.data?["amount"] == nil, "one field on the wire: \(String(describing: remote["samples/s"]))")
        }
    }

    @Test("a record pulled without a field a column holds (the last writer's version did not have it) clears that column, as the server holds it")
    func absentFieldClearsColumn() async throws {
        try await TestServer.run { server in
            let v1 = try Self.store(version: 1)
            let v2 = try Self.store(version: 2, keepsFieldName: true)
            let v1Client = ClientFixture.client(store: v1, server: server)
            let v2Client = ClientFixture.client(store: v2, server: server)
            try await v1.database.write { db in try db.execute(sql: "INSERT INTO samples (id, kind, value) VALUES ('s', 'steps', 5)") }
            try await v1Client.sync()
            try await v2Client.sync()
            try await v2.database.write { db in try db.execute(sql: "UPDATE samples SET unit = 'count' WHERE id = 's'") }
            try await v2Client.sync()
            // v1 edits before it heard of the unit: the last writer wins, and its record has no unit.
            try await v1.database.write { db in try db.execute(sql: "UPDATE samples SET value = 6 WHERE id = 's'") }
            try await v1Client.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["samples/s"]?.data?["unit"] == nil)
            try await v2Client.sync()
            #expect(try await Self.row("s", in: v2) == ["id": "s", "kind": "steps", "amount": "6", "unit": "NULL"], "v2 holds what the server holds")
        }
    }

    @Test("a device upgraded to the version that adds a column finds the value it kept for that field in the column")
    func upgradeFoldsKeptFields() async throws {
        try await TestServer.run { server in
            let writer = try Self.store(version: 2, keepsFieldName: true)
            try await writer.database.write { db in
                try db.execute(sql: "INSERT INTO samples (id, kind, amount, unit) VALUES ('s', 'weight', 80, 'kg')")
            }
            try await ClientFixture.client(store: writer, server: server).sync()
            let path = ClientFixture.storePath()
            let old = try Self.store(version: 1, at: path)
            try await ClientFixture.client(store: old, server: server).sync()
            try await old.close()

            let upgraded = try Self.store(version: 2, keepsFieldName: true, at: path)
            #expect(try await Self.row("s", in: upgraded)["unit"] == "kg")
            try await upgraded.database.write { db in try db.execute(sql: "UPDATE samples SET amount = 81 WHERE id = 's'") }
            try await ClientFixture.client(store: upgraded, server: server).sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["samples/s"]?.data?["unit"] == .string("kg"))
            #expect(remote["samples/s"]?.data?["value"] == .integer(81))
        }
    }
}
