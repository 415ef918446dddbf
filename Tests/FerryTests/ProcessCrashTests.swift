import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// Real processes killed with SIGKILL: `ferry serve` in the middle of pushes, and `ferry client
/// sync` at random moments. No cleanup code runs in a killed process; what is on disk is all
/// that is left, and it must be enough.
@Suite("Process crashes", .serialized, .timeLimit(.minutes(5)))
struct ProcessCrashTests {
    static let records = 20_000

    static func serve(_ database: String, port: Int, in directory: URL) throws -> FerryProcess {
        try FerryProcess(
            ["serve", "--database", "sqlite:\(database)", "--port", "\(port)", "--jwt-secret", TestServer.secret, "--rate-limit", "off"],
            in: directory
        )
    }

    /// Opens the server's database while no server runs: SQLite recovers what a kill left.
    static func serverState(_ database: String) throws -> (integrity: String, records: Int, versions: ClosedRange<Int>?, lastMutationID: Int) {
        let queue = try DatabaseQueue(path: database)
        defer { try? queue.close() }
        return try queue.read { db in
            let integrity = try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "nothing"
            let row = try Row.fetchOne(db, sql: "SELECT COUNT(*), MIN(version), MAX(version) FROM records WHERE user_id = 'alice'")!
            let last = try Int.fetchOne(db, sql: "SELECT MAX(last_mutation_id) FROM clients WHERE user_id = 'alice'") ?? 0
            let versions = (row[1] as Int?).flatMap { low in (row[2] as Int?).map { low...$0 } }
            return (integrity, row[0], versions, last)
        }
    }

    @Test(
        "ferry serve killed with SIGKILL five times during a 20,000-record sync: every batch applied whole or not at all, the database intact, each record once"
    )
    func serverKilledMidPush() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let directory = TestDirectory.make("server-crash")
        let database = directory.appendingPathComponent("server.sqlite").path
        var server = try Self.serve(database, port: 0, in: directory)
        let port = try await server.listeningPort()

        let store = try ClientFixture.openStore(at: ClientFixture.storePath())
        try await store.database.write { db in
            for index in 0..<Self.records {
                try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES (?, 'steps', ?)", arguments: ["e-\(index)", index])
            }
        }
        var configuration = SyncConfiguration()
        // Every request is retried until the server is back; waits are short, real ones.
        configuration.retry = RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100), maximumAttempts: 100_000)
        let token = try await TestServer.token(for: "alice")
        let client = FerryClient(
            store: store,
            transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!),
            token: { token },
            configuration: configuration
        )
        let sync = Task { try await client.sync() }

        for kill in 1...5 {
            // Kill once the server has taken a few more batches.
            let target = Self.records - kill * 3_000
            while try await store.database.read({ db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state IN (0, 1)") ?? 0 })
                > target
            {
                try await Task.sleep(for: .milliseconds(5))
            }
            await server.killHard()
            let state = try Self.serverState(database)
            #expect(state.integrity == "ok", "kill \(kill)")
            #expect(
                state.records % configuration.batchSize == 0,
                "kill \(kill): \(state.records) records, not whole batches of \(configuration.batchSize)"
            )
            #expect(state.records == state.lastMutationID, "kill \(kill): the client's high-water mark and its records moved together")
            #expect(state.versions.map { $0 == 1...1 } ?? true, "kill \(kill): a record applied twice")
            server = try Self.serve(database, port: port, in: directory)
            _ = try await server.listeningPort()
        }
        _ = try await sync.value
        await server.killHard()
        let state = try Self.serverState(database)
        #expect(state.integrity == "ok")
        #expect(state.records == Self.records)
        #expect(state.versions == 1...1, "each record applied exactly once")
        let local = try await store.database.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state IN (0, 1)") ?? -1,
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events") ?? -1
            )
        }
        #expect(local.0 == 0, "nothing queued or in flight")
        #expect(local.1 == Self.records)
        let pushesCut = try await client.journal.events().filter { $0.message.hasPrefix("POST /v1/push failed") }.count
        #expect(pushesCut >= 1, "no kill cut a push short")
        // Every kill lands during the sync (the loop waits for batches still to come), but not
        // always during a request: on a loaded machine a restart can finish while the client
        // applies an answer, and its next request then meets the new server.
        let failed = try await client.journal.events().filter { $0.kind == .request && $0.message.contains("failed") }.count
        #expect(failed >= 1, "the kills cut requests")
        try await store.close()
    }

    @Test("ferry client sync killed with SIGKILL at ten random moments, then one clean sync: each of 20,000 records on the server once, nothing left")
    func clientKilledMidSync() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let directory = TestDirectory.make("client-crash")
            let storeOptions = ["--store", directory.appendingPathComponent("store").path, "--user", "alice"]
            let lines = directory.appendingPathComponent("records.jsonl")
            try (0..<Self.records).map { #"{"entityID": "e-\#($0)", "data": {"value": \#($0)}, "naturalKey": "k-\#($0)"}"# }
                .joined(separator: "\n").write(to: lines, atomically: true, encoding: .utf8)
            let imported = try await FerryProcess.run(["client", "import"] + storeOptions + ["--entity", "events", "--file", lines.path])
            try #require(imported.status == 0, "\(imported.error)")

            let token = try await TestServer.token(for: "alice")
            let sync = ["client", "sync"] + storeOptions + ["--server", server.baseURL, "--token", token]
            var random = JitterGenerator(seed: 20_261_123)
            var killedDuringSync = 0
            for _ in 0..<10 {
                let process = try FerryProcess(sync, in: directory)
                try await Task.sleep(for: .milliseconds(Int.random(in: 20...600, using: &random)))
                if process.process.isRunning { killedDuringSync += 1 }
                await process.killHard()
            }
            let last = try await FerryProcess.run(sync + ["--json"])
            #expect(last.status == 0, "\(last.error)")
            #expect(last.output.contains(#""pending":0"#), "\(last.output)")
            #expect(killedDuringSync > 0, "no kill landed during a sync")

            let remote = try await server.pullAll(token: token)
            #expect(remote.count == Self.records)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "a record applied twice")
            let status = try await FerryProcess.run(["client", "status"] + storeOptions + ["--json"])
            #expect(status.output.contains(#""pending":0"#) && status.output.contains(#""deadLettered":0"#), "\(status.output)")
        }
    }
}
