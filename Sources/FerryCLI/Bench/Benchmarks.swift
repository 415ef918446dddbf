import Ferry
import FerryProtocol
import FerryServer
import FerryTesting
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
    var root: URL
    var records: Int
    /// Where drain, sync and pull keep the server's records: PostgreSQL, or SQLite files under `root` when `nil`.
    var postgres: PostgresLocation?
    /// `postgres` as given on the command line, for the `ferry serve` child process.
    var postgresURL: String?
    /// Records of other users in the server's storage before drain, sync and pull.
    var otherRecords = 0
    /// How the clients reach the server.
    var transport: @Sendable (URL) -> any SyncTransport = { HTTPClientTransport(baseURL: $0) }

    static let table = SyncedTable(table: "events", naturalKey: "sample_id")
    /// Mutations per push and changes per pull page of the floors: the client's defaults.
    static let batchSize = SyncConfiguration().batchSize

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
    /// `prefix` names the rows' ids: another device's copies of the same samples (same natural keys) take another.
    /// With `versions`, each row's version goes into a `versions` table too, as a pull writes it.
    static func writeEvents(_ count: Int, into database: DatabasePool, prefix: String = "e", versions: Bool = false) async throws {
        for start in stride(from: 0, to: count, by: 1000) {
            try await database.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO events (id, kind, value, sample_id) VALUES (?, 'steps', ?, ?)")
                let version =
                    try versions ? db.cachedStatement(sql: "INSERT INTO versions (entity, entity_id, version) VALUES ('events', ?, 1)") : nil
                for index in start..<min(start + 1000, count) {
                    try insert.execute(arguments: ["\(prefix)-\(index)", index, "hk:\(index)"])
                    try version?.execute(arguments: ["\(prefix)-\(index)"])
                }
            }
        }
    }

    static func mutation(_ index: Int, prefix: String = "e") -> Mutation {
        .upsert(
            id: Int64(index + 1),
            entity: "events",
            entityID: "\(prefix)-\(index)",
            data: ["kind": .string("steps"), "value": .integer(Int64(index))],
            naturalKey: "hk:\(index)"
        )
    }

    // MARK: - capture

    /// Rounds of `capture`, each side on fresh files; the median of each side is reported.
    /// At 100,000 writes one round of either side takes well under a second, short enough for
    /// the machine's noise to swing a single ratio by 30%; at a million one round is enough.
    var captureRounds: Int { max(1, min(5, 500_000 / records)) }

    func capture() async throws -> BenchResult {
        var captured: [BenchMeasurement] = []
        var plain: [BenchMeasurement] = []
        for round in 1...captureRounds {
            let folder = try folder("capture-\(round)")
            let store = try FerryStore(path: folder.appendingPathComponent("captured.sqlite").path, schema: Self.schema(), tables: [Self.table])
            captured.append(
                try await BenchMeasurement.measure(items: records) {
                    try await Self.writeEvents(records, into: store.database)
                    return (nil, nil)
                }
            )
            let queued = try await store.database.read { db in try OutboxTable.pendingCount(db) }
            guard queued == records else { throw CommandFailure("capture queued \(queued) of \(records) writes") }
            try await store.close()
            let database = try DatabasePool(path: folder.appendingPathComponent("plain.sqlite").path)
            try Self.schema().migrate(database)
            plain.append(
                try await BenchMeasurement.measure(items: records) {
                    try await Self.writeEvents(records, into: database)
                    return (nil, nil)
                }
            )
            try database.close()
        }
        let ferry = BenchMeasurement.median(captured)
        let baseline = BenchMeasurement.median(plain)
        return BenchResult(
            name: "capture",
            what: "\(records.formatted()) writes to a synced table, captured into the outbox (median of \(captureRounds))",
            ferry: ferry,
            baselineName: "the same writes, no capture",
            baseline: baseline,
            comparison: String(format: "%.2fx the time of uncaptured writes", ferry.seconds / baseline.seconds)
        )
    }

    // MARK: - drain, sync and pull

    /// Drain, sync and a fresh device's pull against a `ferry serve` child process over
    /// loopback, as an app meets its server. Each floor calls the same storage engine
    /// directly, in this process, on storage of its own. The drain always runs: the pull
    /// reads what it pushed, and the sync's floor is the drain's plus the pull's.
    func serverSide(wanted: Set<String>) async throws -> [BenchResult] {
        let folder = try folder("server")
        let run = UUID().uuidString.prefix(8)
        // Users of their own on every run, so a PostgreSQL database reused across runs counts nothing twice.
        let (drainUser, syncUser, floorUser) = ("drain-\(run)", "sync-\(run)", "floor-\(run)")
        let serverPath = folder.appendingPathComponent("server.sqlite").path
        if otherRecords > 0 { try await seedOtherUsers(of: run, into: try await storage(sqlitePath: serverPath)) }
        let floor = try await storage(sqlitePath: folder.appendingPathComponent("floor.sqlite").path)
        defer { Task { try? await floor.close() } }
        let bench = try await BenchServer(folder: folder, database: postgresURL ?? "sqlite:\(serverPath)", records: records, transport: transport)
        defer { bench.server.stop() }

        let pusher = try await bench.device("drain-1", of: drainUser)
        try await Self.writeEvents(records, into: pusher.store.database)
        let drain = try await bench.measure {
            let summary = try await pusher.push()
            guard summary.acknowledged == records else { throw CommandFailure("drain acknowledged \(summary.acknowledged) of \(records)") }
            return summary.requests
        }
        let pushFloor = try await floorPush(records, user: floorUser, into: floor)
        let pullFloor = try await floorPull(user: floorUser, from: floor)
        var results = [
            againstFloor(
                name: "drain",
                what:
                    "\(records.formatted()) pending mutations pushed to a ferry serve process on \(postgres?.description ?? "SQLite"), no rate limit",
                ferry: drain,
                floorName: "storage floor: \(engineName).push, \(Self.batchSize) a batch",
                floor: pushFloor
            )
        ]
        if wanted.contains("merge") {
            results.append(
                try await merge(on: bench, user: drainUser, floor: try await floorPush(records, user: floorUser, into: floor, prefix: "m"))
            )
        }
        if wanted.contains("sync") { results.append(try await sync(on: bench, user: syncUser, floor: pushFloor)) }
        if !wanted.isDisjoint(with: ["pull", "relaunch"]) {
            results += try await pull(on: bench, user: drainUser, floor: pullFloor, relaunch: wanted.contains("relaunch"))
        }
        return results.filter { wanted.contains($0.name) }
    }

    /// The storage engine the server side measures against.
    private var engineName: String { postgres == nil ? "SQLiteSyncStorage" : "PostgresSyncStorage" }

    /// Another device of the drain's user holds the same samples under ids of its own.
    private func merge(on bench: BenchServer, user: String, floor: BenchMeasurement) async throws -> BenchResult {
        // Named apart from the pull's fresh devices (drain-2…drain-6): this store already holds the records.
        let copy = try await bench.device("merge-1", of: user)
        try await Self.writeEvents(records, into: copy.store.database, prefix: "m")
        let merge = try await bench.measure {
            let summary = try await copy.push()
            guard summary.acknowledged == records, summary.merged == records, summary.rekeyed == records else {
                throw CommandFailure(
                    "merge acknowledged \(summary.acknowledged), merged \(summary.merged), re-keyed \(summary.rekeyed) of \(records)"
                )
            }
            return summary.requests
        }
        return againstFloor(
            name: "merge",
            what: "a second device drains \(records.formatted()) records the server holds by natural key: each merged, re-keyed locally",
            ferry: merge,
            floorName: "storage floor: \(engineName).push of the same merges",
            floor: floor
        )
    }

    /// One device's sync of new records: the push, and a pull that reads past its own.
    private func sync(on bench: BenchServer, user: String, floor: BenchMeasurement) async throws -> BenchResult {
        let device = try await bench.device("sync-1", of: user)
        try await Self.writeEvents(records, into: device.store.database)
        // When the pull began, from the status the client publishes: the push's share of the run.
        let updates = await device.statusUpdates()
        let pullStarted = Task {
            for await status in updates { if case .downloading = status.phase { return ContinuousClock.now } }
            return ContinuousClock.now
        }
        let began = ContinuousClock.now
        var sync = try await bench.measure {
            let report = try await device.sync()
            // The device's own uploads do not come back: the pull reads past them and brings nothing.
            guard report.upload.acknowledged == records, report.pull.received == 0 else {
                throw CommandFailure("sync pushed \(report.upload.acknowledged) of \(records) and pulled \(report.pull.received) of 0")
            }
            return report.requests
        }
        sync.extra = ["pushMilliseconds": Int(((await pullStarted.value) - began).seconds * 1000)]
        pullStarted.cancel()
        return againstFloor(
            name: "sync",
            what: "one device's sync of \(records.formatted()) new records: push them, then a pull that reads past its own",
            ferry: sync,
            floorName: "storage floor: the drain's push",
            floor: floor
        )
    }

    /// Five fresh devices pull in turn (a plan that decays after the load shows as a slow run);
    /// with `relaunch`, the first launches again on the store it filled.
    private func pull(on bench: BenchServer, user: String, floor: BenchMeasurement, relaunch: Bool) async throws -> [BenchResult] {
        var rounds: [BenchMeasurement] = []
        var fresh: FerryClient?
        for round in 0..<5 {
            let device = try await bench.device("drain-\(round + 2)", of: user)
            rounds.append(
                try await bench.measure {
                    let report = try await device.sync()
                    guard report.pull.applied == records else {
                        throw CommandFailure("a fresh device applied \(report.pull.applied) of \(records)")
                    }
                    return report.requests
                }
            )
            if round == 0 { fresh = device } else { try await device.store.close() }
        }
        let times = rounds.map(\.seconds).sorted()
        var pull = BenchMeasurement.median(rounds)
        // The work itself: the storage reads the pages, and the device writes the same rows and versions.
        var writes: [BenchMeasurement] = []
        for _ in 0..<3 { writes.append(try await floorDeviceWrite()) }
        let device = BenchMeasurement.median(writes)
        var work = floor
        work.seconds += device.seconds
        work.extra = ["storageMs": Int(floor.seconds * 1000), "deviceWriteMs": Int(device.seconds * 1000)]
        pull.extra = [
            "runs": rounds.count, "fastestMs": Int(times[0] * 1000), "slowestMs": Int(times[times.count - 1] * 1000),
            "slowestOverFastestPercent": Int(times[times.count - 1] / times[0] * 100),
        ]
        guard let fresh else { throw CommandFailure("no fresh device") }
        let result = BenchResult(
            name: "pull",
            what: "a fresh device's first pull of \(records.formatted()) records (the median of five devices)",
            ferry: pull,
            baselineName: "floor: \(engineName).pull, \(Self.batchSize) a page, then the same rows and versions written uncaptured",
            baseline: work,
            comparison: String(
                format: "%.2fx the floor's time (%.2fx the storage's pull alone)",
                pull.seconds / work.seconds,
                pull.seconds / floor.seconds
            )
        )
        guard relaunch else { return [result] }
        // The app starts again on the store it filled: a launch's sync, nothing changed.
        try await fresh.store.close()
        let relaunched = try await bench.device("drain-2", of: user)
        var measured = try await BenchMeasurement.measure(items: records) {
            let report = try await relaunched.sync()
            guard report.pull.received == 0 else { throw CommandFailure("a relaunch pulled \(report.pull.received) records again") }
            return (report.requests, nil)
        }
        measured.serverPeakMemoryMB = bench.server.peakMemoryMB
        return [
            result,
            BenchResult(
                name: "relaunch",
                what: "an app launched again on a store holding \(records.formatted()) records, nothing changed since",
                ferry: measured,
                baselineName: "a launch that pulls everything again (the first pull above)",
                baseline: pull,
                comparison: "\(measured.requests ?? 0) request\(measured.requests == 1 ? "" : "s") against \(pull.requests ?? 0), "
                    + String(format: "%.0fx less time", pull.seconds / max(measured.seconds, 0.000_001))
            ),
        ]
    }

    /// A result whose baseline is a storage floor, compared by time.
    private func againstFloor(name: String, what: String, ferry: BenchMeasurement, floorName: String, floor: BenchMeasurement) -> BenchResult {
        BenchResult(
            name: name,
            what: what,
            ferry: ferry,
            baselineName: floorName,
            baseline: floor,
            comparison: String(format: "%.2fx the storage floor's time", ferry.seconds / floor.seconds)
        )
    }

    /// The storage engine, opened in this process: on `postgres`, else the SQLite file at `sqlitePath`.
    private func storage(sqlitePath: String) async throws -> any SyncStorage {
        if let postgres { return try await PostgresSyncStorage.connect(to: postgres) }
        return try SQLiteSyncStorage(path: sqlitePath)
    }

    /// The storage floor of a push: `count` mutations, a client's batch at a time, timing the storage calls
    /// alone (each batch is validated and encoded before its clock starts).
    private func floorPush(_ count: Int, user: String, into floor: any SyncStorage, prefix: String = "e") async throws -> BenchMeasurement {
        PeakMemory.reset()
        var elapsed = Duration.zero
        for start in stride(from: 0, to: count, by: Self.batchSize) {
            let batch = (start..<min(start + Self.batchSize, count)).map { IncomingMutation(Self.mutation($0, prefix: prefix)) }
            let began = ContinuousClock.now
            _ = try await floor.push(userID: user, clientID: "floor-\(prefix)", mutations: batch)
            elapsed += ContinuousClock.now - began
        }
        return BenchMeasurement(
            seconds: elapsed.seconds,
            items: count,
            requests: (count + Self.batchSize - 1) / Self.batchSize,
            peakMemoryMB: PeakMemory.megabytes()
        )
    }

    /// The storage floor of a pull: every record of `user`, a client's page at a time.
    private func floorPull(user: String, from floor: any SyncStorage) async throws -> BenchMeasurement {
        try await BenchMeasurement.measure(items: records) {
            var cursor: String?
            var pages = 0
            var read = 0
            repeat {
                let page = try await floor.pull(userID: user, cursor: cursor, limit: Self.batchSize, ownWrites: nil)
                read += page.count
                pages += 1
                cursor = page.cursor
                if !page.hasMore { break }
            } while true
            guard read == records else { throw CommandFailure("the storage floor read \(read) of \(records)") }
            return (pages, nil)
        }
    }

    /// The device's side of a pull's floor: the pulled rows (the bench's events) and a version for
    /// each, written to a store with nothing synced (no capture, no outbox, no journal), a page a
    /// transaction as the client applies them.
    private func floorDeviceWrite() async throws -> BenchMeasurement {
        let database = try DatabasePool(path: try folder("pull-floor-\(UUID().uuidString.prefix(8))").appendingPathComponent("device.sqlite").path)
        defer { try? database.close() }
        try Self.schema().migrate(database)
        try await database.write { db in
            try db.execute(
                sql:
                    "CREATE TABLE versions (entity TEXT NOT NULL, entity_id TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (entity, entity_id)) WITHOUT ROWID"
            )
        }
        return try await BenchMeasurement.measure(items: records) {
            try await Self.writeEvents(records, into: database, versions: true)
            return ((records + Self.batchSize - 1) / Self.batchSize, nil)
        }
    }

    /// Fills the server's storage with `otherRecords` records of other users, 10,000 each,
    /// before the server starts: one user's push and pull must not cost more for them.
    private func seedOtherUsers(of run: Substring, into storage: any SyncStorage) async throws {
        let perUser = 10_000
        for user in stride(from: 0, to: otherRecords, by: perUser) {
            let count = min(perUser, otherRecords - user)
            for start in stride(from: 0, to: count, by: 500) {
                let batch = (start..<min(start + 500, count)).map { IncomingMutation(Self.mutation($0)) }
                _ = try await storage.push(userID: "other-\(run)-\(user / perUser)", clientID: "seed", mutations: batch)
            }
        }
        try await storage.close()
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
            let server = try await FerryTestServer.start(
                storage: SQLiteSyncStorage(path: folder.appendingPathComponent("server.sqlite").path),
                rateLimiter: TokenBucketRateLimiter(policy: .default, clock: clock)
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
                    return (summary.requests, simulated.seconds)
                }
                measurement.extra = ["rateLimited": wire.count(status: 429)]
                try? await server.stop()
                return measurement
            } catch {
                try? await server.stop()
                throw error
            }
        }
        let ferry = try await run(batchSize: Self.batchSize, folder: "naive-ferry")
        let oneEach = try await run(batchSize: 1, folder: "naive-one-each")
        return BenchResult(
            name: "naive",
            what: "\(count.formatted()) mutations under 300 requests per minute",
            ferry: ferry,
            baselineName: "one request per mutation, honouring 429 and RateLimit-*",
            baseline: oneEach,
            comparison: "\((oneEach.requests ?? 0) / max(1, ferry.requests ?? 1))x fewer requests, "
                + String(format: "%.0f s vs %.0f s of simulated time", ferry.simulatedSeconds ?? 0, oneEach.simulatedSeconds ?? 0)
        )
    }

    // MARK: - launch

    /// The launch storm with the scheduler, against the same triggers each calling sync() directly.
    func launch() async throws -> BenchResult {
        let folder = try folder("launch")
        let server = try await FerryTestServer.start(storage: SQLiteSyncStorage(path: folder.appendingPathComponent("server.sqlite").path))
        do {
            var seed: [Mutation] = []
            for (entity, count) in [("projects", 100), ("tasks", 100), ("calendar_events", 96)] {
                for index in 0..<count {
                    seed.append(
                        .upsert(id: Int64(seed.count + 1), entity: entity, entityID: "\(entity)-\(index)", data: ["title": .string("\(index)")])
                    )
                }
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
            try? await server.stop()
            return BenchResult(
                name: "launch",
                what: "the launch storm: 296 records on the server, 6 sync triggers within 100 ms",
                ferry: withScheduler,
                baselineName: "each trigger calls sync() directly",
                baseline: without,
                comparison: "\(runs) run and \(processed) records processed vs \(naiveRuns) runs and \(naiveProcessed)"
            )
        } catch {
            try? await server.stop()
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
