import Ferry
import FerryProtocol
import FerryServer
import Foundation
import GRDB

/// A benchmark's result: Ferry's side and its baseline, measured in the same process run.
struct BenchResult: Sendable {
    var name: String
    var what: String
    var ferry: BenchMeasurement
    var baselineName: String
    var baseline: BenchMeasurement
    /// How Ferry compares, in the benchmark's own terms ("1.4x the time", "500x fewer requests").
    var comparison: String
}

/// `ferry bench`'s benchmarks. Each works in its own folder under `root`.
struct Benchmarks {
    let root: URL
    let records: Int
    /// Where drain and sync keep the server's records: PostgreSQL, or SQLite files under `root` when `nil`.
    var postgres: PostgresLocation?

    static let table = SyncedTable(table: "events", naturalKey: "sample_id")

    static func schema() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("bench-v1") { db in
            try db.execute(sql: "CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, sample_id TEXT)")
        }
        return migrator
    }

    private func folder(_ name: String) throws -> URL {
        let url = root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Inserts `count` events, 1,000 per transaction, as an app writing in bursts would.
    static func writeEvents(_ count: Int, into database: DatabasePool) async throws {
        for start in stride(from: 0, to: count, by: 1000) {
            try await database.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO events (id, kind, value, sample_id) VALUES (?, 'steps', ?, ?)")
                for index in start..<min(start + 1000, count) { try insert.execute(arguments: ["e-\(index)", index, "hk:\(index)"]) }
            }
        }
    }

    static func mutation(_ index: Int) -> Mutation {
        .upsert(id: Int64(index + 1), entity: "events", entityID: "e-\(index)", data: ["kind": .string("steps"), "value": .integer(Int64(index))], naturalKey: "hk:\(index)")
    }

    // MARK: - capture

    /// Rounds of `capture`, each side on fresh files; the median of each side is reported.
    /// One round of either side takes well under a second, short enough for the machine's
    /// noise to swing a single ratio by 30%.
    static let captureRounds = 5

    func capture() async throws -> BenchResult {
        var captured: [BenchMeasurement] = []
        var plain: [BenchMeasurement] = []
        for round in 1...Self.captureRounds {
            let folder = try folder("capture-\(round)")
            let store = try FerryStore(path: folder.appendingPathComponent("captured.sqlite").path, schema: Self.schema(), tables: [Self.table])
            captured.append(try await BenchMeasurement.measure(items: records) {
                try await Self.writeEvents(records, into: store.database)
                return (nil, nil)
            })
            let queued = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 0") ?? 0 }
            guard queued == records else { throw CommandFailure("capture queued \(queued) of \(records) writes") }
            try await store.close()
            let database = try DatabasePool(path: folder.appendingPathComponent("plain.sqlite").path)
            try Self.schema().migrate(database)
            plain.append(try await BenchMeasurement.measure(items: records) {
                try await Self.writeEvents(records, into: database)
                return (nil, nil)
            })
            try database.close()
        }
        let ferry = BenchMeasurement.median(captured)
        let baseline = BenchMeasurement.median(plain)
        return BenchResult(
            name: "capture", what: "\(records.formatted()) writes to a synced table, captured into the outbox (median of \(Self.captureRounds))",
            ferry: ferry, baselineName: "the same writes, no capture", baseline: baseline,
            comparison: String(format: "%.2fx the time of uncaptured writes", ferry.seconds / baseline.seconds)
        )
    }

    // MARK: - drain and sync

    func drainAndSync() async throws -> [BenchResult] {
        let folder = try folder("drain")
        // The server and the floor each on storage of their own: two SQLite files, or two
        // pools on one PostgreSQL database (users of their own, so earlier runs do not count).
        func storage(_ name: String) async throws -> any SyncStorage {
            if let postgres { return try await PostgresSyncStorage.connect(to: postgres) }
            return try SQLiteSyncStorage(path: folder.appendingPathComponent("\(name).sqlite").path)
        }
        let floor = try await storage("floor")
        do {
            let results = try await DemoServer.with(in: folder, rateLimit: nil, storage: try await storage("server")) { server in
                try await drainAndSync(server: server, floor: floor, folder: folder)
            }
            try await floor.close()
            return results
        } catch {
            try? await floor.close()
            throw error
        }
    }

    private func drainAndSync(server: DemoServer, floor: any SyncStorage, folder: URL) async throws -> [BenchResult] {
        let user = "bench-\(UUID().uuidString.prefix(8))"
        let token = try await server.token(for: user)
        let store = try FerryStore(path: folder.appendingPathComponent("device-1.sqlite").path, schema: Self.schema(), tables: [Self.table])
        try await Self.writeEvents(records, into: store.database)
        let client = FerryClient(store: store, transport: URLSessionTransport(baseURL: server.baseURL), token: { token })
        let drain = try await BenchMeasurement.measure(items: records) {
            let summary = try await client.push()
            guard summary.acknowledged == records else { throw CommandFailure("drain acknowledged \(summary.acknowledged) of \(records)") }
            return (summary.requests, nil)
        }

        // Validated and encoded before the clock starts: the floor is storage alone.
        let mutations = (0..<records).map { IncomingMutation(Self.mutation($0)) }
        let storageWrite = try await BenchMeasurement.measure(items: records) {
            for start in stride(from: 0, to: records, by: 500) {
                _ = try await floor.push(userID: user, clientID: "floor", mutations: Array(mutations[start..<min(start + 500, records)]))
            }
            return (records / 500, nil)
        }

        let fresh = try FerryStore(path: folder.appendingPathComponent("device-2.sqlite").path, schema: Self.schema(), tables: [Self.table])
        let newDevice = FerryClient(store: fresh, transport: URLSessionTransport(baseURL: server.baseURL), token: { token })
        let sync = try await BenchMeasurement.measure(items: records) {
            let report = try await newDevice.sync()
            guard report.pull.received == records else { throw CommandFailure("sync pulled \(report.pull.received) of \(records)") }
            return (report.requests, nil)
        }
        let storageRead = try await BenchMeasurement.measure(items: records) {
            var cursor: String?
            var pages = 0
            var read = 0
            repeat {
                let page = try await floor.pull(userID: user, cursor: cursor, limit: 500)
                read += page.count
                pages += 1
                cursor = page.cursor
                if !page.hasMore { break }
            } while true
            guard read == records else { throw CommandFailure("the storage floor read \(read) of \(records)") }
            return (pages, nil)
        }
        let engine = postgres == nil ? "SQLiteSyncStorage" : "PostgresSyncStorage"
        return [
            BenchResult(
                name: "drain", what: "\(records.formatted()) pending mutations pushed to a local server on \(postgres?.description ?? "SQLite"), no rate limit",
                ferry: drain, baselineName: "storage floor: \(engine).push, 500 a batch", baseline: storageWrite,
                comparison: String(format: "%.2fx the storage floor's time", drain.seconds / storageWrite.seconds)
            ),
            BenchResult(
                name: "sync", what: "a fresh client pulling \(records.formatted()) records", ferry: sync,
                baselineName: "storage floor: \(engine).pull, 500 a page", baseline: storageRead,
                comparison: String(format: "%.2fx the storage floor's time", sync.seconds / storageRead.seconds)
            ),
        ]
    }

    // MARK: - naive

    /// 5,000 mutations into 300 requests a minute: one request each (the old way, with a
    /// client that honours 429 and the rate-limit headers) against Ferry's batches. Client and
    /// server share a virtual clock, so minutes of waiting take no time.
    func naive() async throws -> BenchResult {
        let count = 5000
        func run(batchSize: Int, folder name: String) async throws -> BenchMeasurement {
            let folder = try folder(name)
            let clock = VirtualClock()
            let server = try await DemoServer.start(
                in: folder, rateLimit: nil, rateLimiter: TokenBucketRateLimiter(policy: .default, clock: clock)
            )
            do {
                let token = try await server.token(for: "bench")
                let store = try FerryStore(path: folder.appendingPathComponent("device.sqlite").path, schema: Self.schema(), tables: [Self.table])
                try await Self.writeEvents(count, into: store.database)
                var configuration = SyncConfiguration()
                configuration.batchSize = batchSize
                let wire = CountingTransport(URLSessionTransport(baseURL: server.baseURL))
                let client = FerryClient(store: store, transport: wire, token: { token }, clock: clock, configuration: configuration)
                let start = clock.now
                var measurement = try await BenchMeasurement.measure(items: count) {
                    let summary = try await client.push()
                    guard summary.acknowledged == count else { throw CommandFailure("pushed \(summary.acknowledged) of \(count)") }
                    let simulated = start.duration(to: clock.now)
                    return (summary.requests, Double(simulated.components.seconds) + Double(simulated.components.attoseconds) / 1e18)
                }
                measurement.extra = ["rateLimited": wire.count(status: 429)]
                await server.stop()
                return measurement
            } catch {
                await server.stop()
                throw error
            }
        }
        let ferry = try await run(batchSize: 500, folder: "naive-ferry")
        let oneEach = try await run(batchSize: 1, folder: "naive-one-each")
        return BenchResult(
            name: "naive", what: "\(count.formatted()) mutations under 300 requests per minute", ferry: ferry,
            baselineName: "one request per mutation, honouring 429 and RateLimit-*", baseline: oneEach,
            comparison: "\((oneEach.requests ?? 0) / max(1, ferry.requests ?? 1))x fewer requests, "
                + String(format: "%.0f s vs %.0f s of simulated time", ferry.simulatedSeconds ?? 0, oneEach.simulatedSeconds ?? 0)
        )
    }

    // MARK: - launch

    /// The launch storm with the scheduler, against the same triggers each calling sync() directly.
    func launch() async throws -> BenchResult {
        let folder = try folder("launch")
        let server = try await DemoServer.start(in: folder, rateLimit: nil)
        do {
            var seed: [Mutation] = []
            for (entity, count) in [("projects", 100), ("tasks", 100), ("calendar_events", 96)] {
                for index in 0..<count { seed.append(.upsert(id: Int64(seed.count + 1), entity: entity, entityID: "\(entity)-\(index)", data: ["title": .string("\(index)")])) }
            }
            try await server.seed(user: "bench", client: "web", mutations: seed)
            let token = try await server.token(for: "bench")
            func client(_ name: String) throws -> FerryClient {
                let store = try FerryStore(path: folder.appendingPathComponent(name).path, schema: DemoApp.schema(), tables: DemoApp.tables)
                return FerryClient(store: store, transport: URLSessionTransport(baseURL: server.baseURL), token: { token })
            }
            let tally = RunTally()

            let scheduled = try client("scheduled.sqlite")
            let scheduler = SyncScheduler(clock: ContinuousClock()) { kind in
                await tally.add(try await scheduled.sync(full: kind == .full).pull.received)
            }
            var withScheduler = try await BenchMeasurement.measure(items: 296) {
                await scheduler.trigger(.launch)
                await scheduler.connectivityChanged(online: true)
                await scheduler.trigger(.becameActive)
                for _ in 0..<3 {
                    try await Task.sleep(for: .milliseconds(15))
                    await scheduler.connectivityChanged(online: false)
                    try await Task.sleep(for: .milliseconds(15))
                    await scheduler.connectivityChanged(online: true)
                }
                try await scheduler.initialSync()
                return (nil, nil)
            }
            await scheduler.stop()
            let (runs, processed) = await (tally.runs, tally.records)
            withScheduler.extra = ["runs": runs, "recordsProcessed": processed]

            // Without: launch, the monitor's first report, became active and three restorations each call sync().
            let direct = try client("direct.sqlite")
            let naiveTally = RunTally()
            var without = try await BenchMeasurement.measure(items: 296) {
                for _ in 0..<6 { await naiveTally.add(try await direct.sync(full: true).pull.received) }
                return (nil, nil)
            }
            let (naiveRuns, naiveProcessed) = await (naiveTally.runs, naiveTally.records)
            without.extra = ["runs": naiveRuns, "recordsProcessed": naiveProcessed]
            await server.stop()
            return BenchResult(
                name: "launch", what: "the launch storm: 296 records on the server, 6 sync triggers within 100 ms", ferry: withScheduler,
                baselineName: "each trigger calls sync() directly", baseline: without,
                comparison: "\(runs) run and \(processed) records processed vs \(naiveRuns) runs and \(naiveProcessed)"
            )
        } catch {
            await server.stop()
            throw error
        }
    }
}

/// Counts runs and the records they pulled.
actor RunTally {
    private(set) var runs = 0
    private(set) var records = 0
    func add(_ pulled: Int) {
        runs += 1
        records += pulled
    }
}
