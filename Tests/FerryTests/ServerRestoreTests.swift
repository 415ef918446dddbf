import Clocks
import Ferry
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// A server restored from a backup: its cursors' positions are handed out again to other
/// changes, so a device whose cursor is ahead of the restored history must notice, pull from
/// scratch, and end where the server is, its unacknowledged changes sent.
@Suite("Server restored from a backup", .timeLimit(.minutes(5)))
struct ServerRestoreTests {
    /// A `ferry serve` process on `database`, and its address.
    static func serve(_ database: TestDatabase, in directory: URL) async throws -> (FerryProcess, URL) {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let process = try FerryProcess(
            ["serve", "--database", database.url.description, "--port", "0", "--jwt-secret", TestServer.secret, "--rate-limit", "off"],
            in: directory
        )
        return (process, URL(string: "http://127.0.0.1:\(try await process.listeningPort())")!)
    }

    static func stop(_ process: FerryProcess) {
        process.process.terminate()
        process.process.waitUntilExit()
    }

    static func client(_ store: FerryStore, _ server: URL) -> FerryClient {
        FerryClient(store: store, transport: URLSessionTransport(baseURL: server), token: { try await TestServer.token(for: "alice") }, jitterSeed: 7)
    }

    static func write(_ id: String, value: Int, in store: FerryStore) async throws {
        try await store.database.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO events (id, kind, value) VALUES (?, 'steps', ?)", arguments: [id, value])
        }
    }

    static func events(in store: FerryStore) async throws -> [String: Int] {
        try await store.database.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, value FROM events").map { ($0[0] as String, $0[1] as Int) })
        }
    }

    /// Takes a backup of `database` now (a file copy, or `pg_dump`), and returns how to restore it:
    /// the database the restored server runs on.
    static func backup(_ database: TestDatabase, in directory: URL) async throws -> @Sendable () async throws -> TestDatabase {
        switch database.url {
        case .sqlite(let path?):
            let copy = directory.appendingPathComponent("backup.sqlite").path
            // The server is stopped: the file and its write-ahead log, if one is left, are the whole database.
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
                try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix)
            }
            return {
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: path + suffix)
                    if FileManager.default.fileExists(atPath: copy + suffix) {
                        try FileManager.default.copyItem(atPath: copy + suffix, toPath: path + suffix)
                    }
                }
                return database
            }
        case .postgres(let location):
            let dump = directory.appendingPathComponent("backup.dump").path
            try await Self.run("pg_dump", ["-Fc", "-f", dump, "--dbname", database.url.description])
            return {
                let restored = try await TestPostgres.createDatabase()
                try await Self.run("pg_restore", ["--no-owner", "--dbname", DatabaseURL.postgres(restored).description, dump])
                _ = location
                return TestDatabase(url: .postgres(restored))
            }
        default:
            throw TestFailure("a backup needs a database file or PostgreSQL")
        }
    }

    static func run(_ tool: String, _ arguments: [String]) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [tool] + arguments
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                process.waitUntilExit()
                continuation.resume()
            }
        }
        guard process.terminationStatus == 0 else {
            throw TestFailure("\(tool) failed: \(String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))")
        }
    }

    @Test(
        "after a restore, devices whose cursors are ahead pull from scratch: none skips another's write, the lost ones leave, queued ones are sent",
        arguments: StorageBackend.allCases
    )
    func restoredServer(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("restore-\(backend)")
        let database = try await TestDatabase.make(backend)
        let phone = try ClientFixture.openStore(at: directory.appendingPathComponent("phone.sqlite").path)
        let tablet = try ClientFixture.openStore(at: directory.appendingPathComponent("tablet.sqlite").path)
        let laptop = try ClientFixture.openStore(at: directory.appendingPathComponent("laptop.sqlite").path)

        // Before the backup: both devices hold r1 and r2.
        var (server, url) = try await Self.serve(database, in: directory)
        try await Self.write("r1", value: 1, in: phone)
        try await Self.write("r2", value: 2, in: phone)
        _ = try await Self.client(phone, url).sync()
        _ = try await Self.client(tablet, url).sync()
        Self.stop(server)
        let restore = try await Self.backup(database, in: directory)

        // After the backup: the phone adds r3 and edits r1, acknowledged; the tablet pulls them,
        // its cursor now past the backup. The phone then writes r4 and does not sync it.
        (server, url) = try await Self.serve(database, in: directory)
        try await Self.write("r3", value: 3, in: phone)
        try await Self.write("r1", value: 10, in: phone)
        _ = try await Self.client(phone, url).sync()
        _ = try await Self.client(tablet, url).sync()
        #expect(try await Self.events(in: tablet) == ["r1": 10, "r2": 2, "r3": 3])
        try await Self.write("r4", value: 4, in: phone)
        Self.stop(server)

        // The restore. A laptop then writes 40 records through the restored server: its history
        // now reaches past the tablet's cursor with changes the tablet never saw.
        let restored = try await restore()
        (server, url) = try await Self.serve(restored, in: directory)
        defer { Self.stop(server) }
        for index in 0..<40 { try await Self.write("l\(index)", value: 100 + index, in: laptop) }
        _ = try await Self.client(laptop, url).sync()

        _ = try await Self.client(tablet, url).sync()
        _ = try await Self.client(phone, url).sync()
        for store in [laptop, tablet] { _ = try await Self.client(store, url).sync() }

        // The restored server's state, with what the phone had queued: r3 and the edit of r1
        // were acknowledged after the backup and are gone; r4 was never acknowledged and is sent.
        var expected = ["r1": 1, "r2": 2, "r4": 4]
        for index in 0..<40 { expected["l\(index)"] = 100 + index }
        for (name, store) in [("tablet", tablet), ("phone", phone), ("laptop", laptop)] {
            #expect(try await Self.events(in: store) == expected, "\(name)")
        }
        let truth = try await RemoteServer(baseURL: url.absoluteString).pullAll(token: try await TestServer.token(for: "alice"))
        #expect(Set(truth.keys) == Set(expected.keys.map { "events/\($0)" }))
        let journal = try await tablet.database.read { db in try String.fetchAll(db, sql: "SELECT json_extract(event, '$.kind') FROM ferry_journal") }
        #expect(journal.contains("pull.restarted") && journal.contains("pull.swept"), "the tablet journaled the restart and the sweep")
        for store in [phone, tablet, laptop] { try await store.close() }
    }
}
