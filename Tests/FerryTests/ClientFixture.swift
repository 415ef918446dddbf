import Clocks
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB

/// A user's store with an `events` table (natural key `hk`) and a client for a test server.
struct ClientFixture {
    static let events = SyncedTable(table: "events", naturalKey: "hk")
    static let notes = SyncedTable(table: "notes", detectsConflicts: true)

    static func schema() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, hk TEXT);
                    CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
                    """
            )
        }
        return migrator
    }

    static func storePath() -> String {
        TestDirectory.make("client").appendingPathComponent("alice.sqlite").path
    }

    static func openStore(at path: String) throws -> FerryStore {
        try FerryStore(path: path, schema: schema(), tables: [events, notes])
    }

    static func client(
        store: FerryStore,
        server: TestServer,
        user: String = "alice",
        transport: (any SyncTransport)? = nil,
        configuration: SyncConfiguration = SyncConfiguration(),
        clock: any Clock<Duration> = ImmediateClock()
    ) -> FerryClient {
        let real = URLSessionTransport(baseURL: URL(string: server.baseURL)!)
        return FerryClient(
            store: store,
            transport: transport ?? real,
            token: { try await TestServer.token(for: user) },
            clock: clock,
            configuration: configuration,
            jitterSeed: 42
        )
    }
}
