import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB

/// One seeded run of devices against a real server through faults, ending in one invariant.
///
/// Alice has a phone, whose app and widget are two client processes on one store, and a
/// laptop; Bob has a phone. The laptop runs the app's version 2, which renamed the events'
/// `value` column to `amount` (the field stays `value`) and added `mood`, a field version 1
/// devices keep beside their rows: at the end it must hold what every version 1 device sent
/// too, and its moods what the server holds. Mid-run, Alice's phone or laptop store may be copied to a new
/// device (a backup restored, a phone migrated), even while that store syncs: the copy keeps
/// the client id and the queue, and must take an id of its own without losing or doubling. From the seed come every step (writes, syncs alone or side by
/// side, a write during a sync, a process killed and reopened, a server restart) and every
/// fault on the wire. At the end, with faults off, each device syncs until caught up, and:
/// every store holds what the server holds, every version the server wrote was heard by one
/// client (nothing applied twice), nothing is queued or in flight or leased, the dead letters
/// are the records too big to send and those the server's rule refused, and neither user's data
/// reached the other. The server runs a rule over notes (`NoteRules`: some refused, some
/// rewritten, some asking for a side effect): every side effect asked is delivered once.
final class FaultSchedule {
    struct Outcome {
        var steps: [String: Int] = [:]
        var faults: [String: Int] = [:]
        var problems: [String] = []
        var log: [String] = []
    }

    /// A client process: a store opened on a file, the client syncing it, and its network.
    struct ClientProcess {
        let name: String
        let user: String
        let path: String
        var store: FerryStore
        var client: FerryClient
        var transport: ScheduleTransport
    }

    /// Over `ProtocolLimits.maxDataBytes`: the server must refuse it, so it ends a dead letter.
    static let bigBody = String(repeating: "x", count: 300 * 1024)

    private let seed: UInt64
    private var random: JitterGenerator
    private let server = RestartableServer(rules: ServerRules([NoteRules()]))
    /// Per store, the notes a write of which the server's rule refuses (a dead letter may stay).
    private var refusable: [String: Set<String>] = [:]
    /// Per user, the records some write of which the rule refused or rewrote: their last write is not the server's.
    private var ruled: [String: Set<String>] = [:]
    /// Per note body, how many stores copied before it was written: a copy made while a change
    /// was queued sends it again under its own client id, a second write the rule judges again,
    /// whose unnamed effect is its own.
    private var copiesBefore: [String: Int] = [:]
    private let ledger = ScheduleLedger()
    private let freezer = Freezer()
    private let configuration: SyncConfiguration
    private var tokens: [String: String] = [:]
    private var processes: [ClientProcess] = []
    /// Killed processes: their stores stay open (a killed process closes nothing) until the end.
    private var killed: [(store: FerryStore, run: Task<Void, Never>)] = []
    private var bigRecords: [String: Set<String>] = [:]
    /// Per user and record: who wrote it and what it held after each write.
    private var history: [String: [String: RecordHistory]] = [:]
    private var counter = 0
    private var copies = 0
    /// Stores on the app's version 2 (the laptop's, and copies of it).
    private var version2: Set<String> = []
    private var outcome = Outcome()

    private init(seed: UInt64) {
        self.seed = seed
        self.random = JitterGenerator(seed: seed)
        var configuration = SyncConfiguration()
        // Small batches and pages: several per sync, so faults land between them.
        configuration.batchSize = Int.random(in: 2...12, using: &random)
        configuration.pullPageSize = Int.random(in: 2...12, using: &random)
        // Photos of up to 300 KB go in several chunks, so faults land inside uploads and downloads.
        configuration.attachmentChunkBytes = Int.random(in: 16...64, using: &random) * 1024
        configuration.leaseRetryInterval = .seconds(2)
        // Conflicts on shared notes end either way; a merging policy keeps both bodies.
        configuration.conflictPolicy =
            [
                .serverWins, .clientWins,
                ConflictPolicy { conflict in
                    guard case .string(let mine) = conflict.local?["body"], case .string(let theirs) = conflict.server?.data?["body"] else {
                        return .acceptServer
                    }
                    return .keep(["body": .string(String("\(theirs)+\(mine)".suffix(200)))])
                },
            ][Int.random(in: 0..<3, using: &random)]
        self.configuration = configuration
    }

    static func run(seed: UInt64) async -> Outcome {
        let schedule = FaultSchedule(seed: seed)
        do {
            try await schedule.play()
        } catch {
            schedule.outcome.problems.append("the schedule stopped: \(error)")
        }
        await schedule.tearDown()
        if !schedule.outcome.problems.isEmpty, let folder = ProcessInfo.processInfo.environment["FERRY_FUZZ_KEEP"] {
            schedule.keepFiles(in: URL(fileURLWithPath: folder).appendingPathComponent("seed-\(seed)"))
        }
        schedule.outcome.faults = schedule.ledger.injectedFaults
        schedule.outcome.log = schedule.ledger.logLines
        return schedule.outcome
    }

    private func note(_ step: String, _ detail: String) {
        outcome.steps[step, default: 0] += 1
        ledger.log("\(step): \(detail)")
    }

    private func roll(_ range: Range<Int>) -> Int { Int.random(in: range, using: &random) }

    // MARK: - Playing

    private func play() async throws {
        try await server.start()
        for user in ["alice", "bob"] { tokens[user] = try await TestServer.token(for: user) }
        let phone = ClientFixture.storePath()
        let laptop = ClientFixture.storePath()
        version2.insert(laptop)
        let bobPhone = ClientFixture.storePath()
        for (name, user, path) in [("phone", "alice", phone), ("widget", "alice", phone), ("laptop", "alice", laptop), ("bob", "bob", bobPhone)] {
            processes.append(try open(name: name, user: user, path: path))
        }
        let stepCount = 20 + roll(0..<20)
        for _ in 0..<stepCount {
            let choice = roll(0..<100)
            let target = roll(0..<processes.count)
            switch choice {
            case ..<40: try await write(on: target)
            case ..<68: await sync(target)
            case ..<78: await syncSideBySide()
            case ..<85: try await writeDuringSync(on: target)
            case ..<90: try await kill(target)
            case ..<93: try await copyStore()
            default:
                try await server.restart()
                note("server restarted", "between steps")
            }
        }
        try await server.start()
        try await finish()
    }

    private func open(name: String, user: String, path: String) throws -> ClientProcess {
        let transport = ScheduleTransport(user: user, name: name, seed: random.next(), server: server, ledger: ledger, freezer: freezer)
        let v2 = version2.contains(path)
        var schema = v2 ? Self.version2Schema() : ClientFixture.schema()
        SchedulePhotos.register(in: &schema)
        let store = try FerryStore(
            path: path,
            schema: schema,
            tables: [v2 ? Self.version2Events : ClientFixture.events, ClientFixture.notes, SchedulePhotos.table(eager: v2)]
        )
        let token = tokens[user]!
        let client = FerryClient(
            store: store,
            transport: transport,
            token: { token },
            clock: FastClock(),
            configuration: configuration,
            jitterSeed: random.next()
        )
        return ClientProcess(name: name, user: user, path: path, store: store, client: client, transport: transport)
    }

    /// Version 2 of the app: `value` renamed to `amount`, `mood` added.
    static func version2Schema() -> DatabaseMigrator {
        var schema = ClientFixture.schema()
        schema.registerMigration("app-v2") { db in
            try db.execute(sql: "ALTER TABLE events RENAME COLUMN value TO amount; ALTER TABLE events ADD COLUMN mood TEXT")
        }
        return schema
    }

    static let version2Events = SyncedTable(table: "events", naturalKey: "hk", fieldNames: ["amount": "value"])

    /// One to four changes in one transaction: creates (some with a natural key every device
    /// and user draws from), edits and deletes of whatever the store holds, edits of notes
    /// every device of the user shares (conflicting), photos taken, replaced and deleted, and
    /// now and then a record too big to send.
    private func write(on index: Int) async throws {
        let process = processes[index]
        let (events, photos) = try await process.store.database.read { db in
            (try String.fetchAll(db, sql: "SELECT id FROM events ORDER BY id"), try String.fetchAll(db, sql: "SELECT id FROM photos ORDER BY id"))
        }
        var statements: [(String, StatementArguments)] = []
        var effects: [Effect] = []
        let v2 = version2.contains(process.path)

        for _ in 0...roll(0..<4) {
            counter += 1
            let stamp = "\(process.user)-\(process.name)-\(counter)"
            switch roll(0..<100) {
            case ..<30:
                let key: String? = roll(0..<2) == 0 ? nil : "hk-\(roll(0..<5))"
                let (kind, value) = (["steps", "sleep"][roll(0..<2)], roll(0..<1000))
                if v2 {
                    statements.append(("INSERT INTO events (id, kind, amount, hk, mood) VALUES (?, ?, ?, ?, ?)", [stamp, kind, value, key, stamp]))
                } else {
                    statements.append(("INSERT INTO events (id, kind, value, hk) VALUES (?, ?, ?, ?)", [stamp, kind, value, key]))
                }
                effects.append(
                    Effect(record: "events/\(stamp)", state: Self.describe(kind: kind, value: "\(value)", naturalKey: key), naturalKey: key != nil)
                )
            case ..<45 where !events.isEmpty:
                let (value, id) = (roll(0..<1000), events[roll(0..<events.count)])
                if v2 {
                    statements.append(("UPDATE events SET amount = ?, kind = ?, mood = ? WHERE id = ?", [value, stamp, stamp, id]))
                } else {
                    statements.append(("UPDATE events SET value = ?, kind = ? WHERE id = ?", [value, stamp, id]))
                }
                effects.append(Effect(record: "events/\(id)", state: nil, update: "kind=\(stamp) value=\(value)"))
            case ..<55 where !events.isEmpty:
                let id = events[roll(0..<events.count)]
                statements.append(("DELETE FROM events WHERE id = ?", [id]))
                effects.append(Effect(record: "events/\(id)", state: nil))
            case ..<75:
                let id = "n-\(roll(0..<3))"
                statements.append(("INSERT INTO notes (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body", [id, stamp]))
                effects.append(Effect(record: "notes/\(id)", state: Self.describe(body: stamp), body: stamp))
            case ..<82:
                let id = "n-\(roll(0..<3))"
                statements.append(("DELETE FROM notes WHERE id = ?", [id]))
                effects.append(Effect(record: "notes/\(id)", state: nil))
            case ..<85 where !photos.isEmpty:
                let id = photos[roll(0..<photos.count)]
                statements.append(("DELETE FROM photos WHERE id = ?", [id]))
                effects.append(Effect(record: "photos/\(id)", state: nil))
            case ..<95:
                // A new photo, or one replacing a row's photo (whose upload may still be under way).
                let photo = roll(0..<10) == 0 ? nil : try await process.store.attach(fileAt: try SchedulePhotos.file(content: roll(0..<40)))
                let id = photos.isEmpty || roll(0..<3) > 0 ? stamp : photos[roll(0..<photos.count)]
                statements.append(
                    (
                        "INSERT INTO photos (id, caption, photo) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET caption = excluded.caption, photo = excluded.photo",
                        [id, stamp, photo]
                    )
                )
                effects.append(Effect(record: "photos/\(id)", state: SchedulePhotos.describe(caption: stamp, photo: photo)))
            default:
                let id = "\(stamp)-big"
                bigRecords[process.path, default: []].insert("notes/\(id)")
                statements.append(("INSERT INTO notes (id, body) VALUES (?, ?)", [id, Self.bigBody]))
                effects.append(Effect(record: "notes/\(id)", state: Self.describe(body: Self.bigBody)))
            }
        }
        let batch = statements
        let changed = try await process.store.database.write { db in
            try batch.map { sql, arguments in
                try db.execute(sql: sql, arguments: arguments)
                return db.changesCount > 0
            }
        }
        for (effect, changed) in zip(effects, changed) where changed {
            history[process.user, default: [:]][effect.record, default: RecordHistory()].add(effect, by: process.path)
            if let body = effect.body { copiesBefore[body] = copies }
            if let body = effect.body, NoteRules.refuses(body) || NoteRules.rewrites(body) {
                ruled[process.user, default: []].insert(effect.record)
                if NoteRules.refuses(body) { refusable[process.path, default: []].insert(effect.record) }
            }
        }
        let summary = statements.map { sql, arguments in
            "\(sql.prefix(6).lowercased()) \(["notes", "photos", "events"].first { sql.contains($0) }!) \(arguments.description.prefix(60))"
        }
        note("write", "\(process.name): \(summary.joined(separator: "; "))")
    }

    private func sync(_ index: Int) async {
        let process = processes[index]
        do {
            let report = try await process.client.sync()
            note("sync", "\(process.name): pushed \(report.upload.acknowledged), pulled \(report.pull.received)")
        } catch {
            note("sync", "\(process.name): failed (\(error))")
        }
    }

    /// Two or three processes sync at once (the app and its widget contend for one store's lease).
    private func syncSideBySide() async {
        var chosen: [Int] = []
        for _ in 0..<(2 + roll(0..<2)) {
            let index = roll(0..<processes.count)
            if !chosen.contains(index) { chosen.append(index) }
        }
        let clients = chosen.map { processes[$0].client }
        await withTaskGroup(of: Void.self) { group in
            for client in clients { group.addTask { _ = try? await client.sync() } }
        }
        note("syncs side by side", chosen.map { processes[$0].name }.joined(separator: " + "))
    }

    private func writeDuringSync(on index: Int) async throws {
        let client = processes[index].client
        let run = Task { _ = try? await client.sync() }
        try await write(on: index)
        await run.value
        note("write during a sync", processes[index].name)
    }

    /// Kills the process at one of its next requests (before it reaches the server or after the
    /// server committed), or between syncs if its sync needs fewer, then opens the store again
    /// as a new process would. A killed process's lease names a process that no longer exists.
    private func kill(_ index: Int) async throws {
        let process = processes[index]
        let (signals, signal) = AsyncStream.makeStream(of: Bool.self)
        process.transport.armKill(atRequest: roll(0..<6)) { signal.yield(true) }
        let client = process.client
        let run = Task {
            _ = try? await client.sync()
            signal.yield(false)
        }
        var iterator = signals.makeAsyncIterator()
        let duringRequest = await iterator.next() ?? false
        if duringRequest {
            let dead = try deadProcessID()
            try await process.store.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [dead]) }
        }
        killed.append((process.store, run))
        processes[index] = try open(name: process.name, user: process.user, path: process.path)
        note("client killed", "\(process.name) \(duringRequest ? "during a request" : "between syncs"), reopened")
    }

    /// Copies one of Alice's stores to a new device, at most twice a schedule, as a backup or a
    /// migration copies the file: between syncs, or while that store's push is on the wire (its
    /// batch in flight in the copy too). The old device's process does not run on the new one:
    /// the copy's lease names a process that does not exist.
    private func copyStore() async throws {
        let sources = processes.indices.filter { processes[$0].user == "alice" && processes[$0].name != "widget" }
        guard copies < 2, !sources.isEmpty else { return }
        copies += 1
        let source = processes[sources[roll(0..<sources.count)]]
        let path = ClientFixture.storePath()
        let database = source.store.database
        let copied = LockIsolated<(any Error)??>(nil)
        let copy = { @Sendable in
            do {
                try database.backup(to: try DatabaseQueue(path: path))
                copied.setValue(.some(nil))
            } catch {
                copied.setValue(.some(error))
            }
        }
        if roll(0..<2) == 0 {
            source.transport.beforeNextPush(copy)
            _ = try? await source.client.sync()
            source.transport.beforeNextPush(nil)
        }
        if copied.value == nil { copy() }  // between syncs, or the sync pushed nothing
        if let error = copied.value ?? nil { throw error }
        try SchedulePhotos.copyFolder(of: source.path, to: path)
        let dead = try deadProcessID()
        let target = try DatabaseQueue(path: path)
        // Changes the copy holds queued are the copy's to send too: a record one of them
        // touches has two writers, and the last write of either may win.
        let (queued, inFlight) = try await target.write { db in
            try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [dead])
            return (
                try String.fetchAll(db, sql: "SELECT DISTINCT entity || '/' || entity_id FROM ferry_outbox WHERE state IN (0, 1, 2)"),
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1") ?? 0
            )
        }
        try target.close()
        for record in queued { history["alice", default: [:]][record, default: RecordHistory()].writers.insert(path) }
        bigRecords[path] = bigRecords[source.path]
        refusable[path] = refusable[source.path]
        if version2.contains(source.path) { version2.insert(path) }
        let name = "copy\(copies)"
        processes.append(try open(name: name, user: "alice", path: path))
        note(
            inFlight > 0 ? "store copied mid-push" : "store copied",
            "\(source.name) to \(name): \(queued.count) records queued, \(inFlight) changes in flight"
        )
    }

    // MARK: - The invariant

    private func finish() async throws {
        for process in processes { process.transport.turnFaultsOff() }
        for round in 0..<3 {
            for process in processes {
                do {
                    try await process.client.sync()
                } catch  where round == 2 {
                    outcome.problems.append("\(process.name): the last sync without faults failed: \(error)")
                } catch {}
            }
        }
        var server: [String: [String: Change]] = [:]
        for user in ["alice", "bob"] {
            server[user] = try await serverRecords(of: user)
            let versions = server[user]!.mapValues(\.version)
            outcome.problems += ledger.exactlyOnceProblems(user: user, serverVersions: versions).map { "\(user): \($0)" }
            outcome.problems += lostChanges(of: user, server: server[user]!).map { "\(user): \($0)" }
        }
        outcome.problems += ledger.inconsistencies
        var checkedPaths: Set<String> = []
        for process in processes where checkedPaths.insert(process.path).inserted {
            outcome.problems += try await problems(of: process, server: server[process.user]!).map { "\(process.name): \($0)" }
        }
        for (user, other) in [("alice", "bob"), ("bob", "alice")] {
            let leaked = server[user]!.values.filter { change in
                change.data.map { "\($0)".contains("\(other)-") } ?? false || change.entityID.hasPrefix("\(other)-")
            }
            if !leaked.isEmpty { outcome.problems.append("\(user) holds \(other)'s records: \(leaked.map(\.entityID))") }
        }
        outcome.problems += try await sideEffectProblems(server: server)
    }

    /// Delivers every side effect the rule asked for, the server stopped: none is left, none is
    /// asked twice for one write, and every note the server holds with a body the rule sends
    /// an effect for has its effect.
    private func sideEffectProblems(server records: [String: [String: Change]]) async throws -> [String] {
        try await server.stop()
        let storage = try SQLiteSyncStorage(path: server.databasePath)
        var asked: [String: Int] = [:]
        while true {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let taken = try await storage.claimSideEffects(limit: 100, now: now, lease: 60_000)
            if taken.isEmpty { break }
            for effect in taken {
                asked["\(effect.payload["note"]?.stringValue ?? "?") \(effect.payload["body"]?.stringValue ?? "?")", default: 0] += 1
                try await storage.sideEffectDelivered(effect.key, at: now)
            }
        }
        var problems: [String] = []
        if try await storage.pendingSideEffects() != 0 { problems.append("side effects are left undelivered") }
        try await storage.close()
        for (write, count) in asked {
            // Once. A store copied while the change was queued sends it again as its own write:
            // a named effect is still one, an unnamed one is that write's own.
            let body = String(write.split(separator: " ").last ?? "")
            let allowed = NoteRules.namesEffect(body) ? 1 : 1 + copies - (copiesBefore[body] ?? copies)
            if count > allowed { problems.append("one write asked for its side effect \(count) times: \(write)") }
        }
        for (user, changes) in records {
            for change in changes.values where change.entity == "notes" {
                guard let body = change.data?["body"]?.stringValue, NoteRules.asksEffect(body) else { continue }
                if asked["\(change.entityID) \(body)"] == nil { problems.append("\(user)'s note \(change.entityID) (\(body)) has no side effect") }
            }
        }
        outcome.steps["side effects delivered", default: 0] += asked.count
        return problems.sorted()
    }

    /// A record only one store ever wrote, without a natural key (so no other record merged
    /// into it) and not too big to send, must end on the server as that store last wrote it:
    /// no conflict can take a change away, so a change that is missing was lost.
    private func lostChanges(of user: String, server: [String: Change]) -> [String] {
        var problems: [String] = []
        for (record, history) in history[user] ?? [:] where history.writers.count == 1 && !history.naturalKey && !(ruled[user] ?? []).contains(record)
        {
            guard let path = history.writers.first, !(bigRecords[path] ?? []).contains(record) else { continue }
            let remote = server[record].flatMap(Self.describe)
            if remote != history.state {
                problems.append(
                    "\(record), written by one store only, was last written as \(history.state ?? "deleted"), but the server holds \(remote ?? "nothing")"
                )
            }
        }
        return problems.sorted()
    }

    private func problems(of process: ClientProcess, server: [String: Change]) async throws -> [String] {
        var problems: [String] = []
        let store = process.store
        let (queued, leases, localVersions) = try await store.database.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state IN (0, 1)") ?? 0,
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_lease") ?? 0,
                Dictionary(
                    try Row.fetchAll(db, sql: "SELECT entity, entity_id, version FROM ferry_versions").map { row -> (String, Int64) in
                        ("\(row[0] as String)/\(row[1] as String)", row[2])
                    },
                    uniquingKeysWith: { $1 }
                )
            )
        }
        if queued != 0 { problems.append("\(queued) changes still queued or in flight") }
        if leases != 0 { problems.append("the sync lease is still held") }

        let big = bigRecords[process.path] ?? []
        let deadLetters = Set(try await process.client.deadLetters().map { "\($0.entity)/\($0.entityID)" })
        if !big.isSubset(of: deadLetters) || !deadLetters.isSubset(of: big.union(refusable[process.path] ?? [])) {
            problems.append(
                "dead letters are \(deadLetters.sorted()), expected the records too big to send, \(big.sorted()), and some the rule refused, "
                    + "of \((refusable[process.path] ?? []).sorted())"
            )
        }

        let version2 = self.version2.contains(process.path)
        var local = try await store.database.read { db in
            var rows: [String: String] = [:]
            let value = version2 ? "amount" : "value"
            for row in try Row.fetchAll(db, sql: "SELECT id, kind, \(value), hk FROM events") {
                rows["events/\(row[0] as String)"] = Self.describe(kind: row[1], value: (row[2] as Int64?).map { "\($0)" }, naturalKey: row[3])
            }
            for row in try Row.fetchAll(db, sql: "SELECT id, body FROM notes") {
                rows["notes/\(row[0] as String)"] = Self.describe(body: row[1])
            }
            return rows.merging(try SchedulePhotos.localRows(db)) { $1 }
        }
        for record in big {
            if local.removeValue(forKey: record) == nil { problems.append("\(record), a dead letter, is gone from the store") }
            if server[record] != nil { problems.append("\(record), too big to send, is on the server") }
        }
        var remote: [String: String] = [:]
        for (key, change) in server where change.op == .upsert {
            remote[key] = Self.describe(change)
            if localVersions[key] != change.version {
                problems.append(
                    "\(key): the store knows version \(localVersions[key].map(String.init) ?? "none"), the server holds \(change.version)"
                )
            }
        }
        for key in Set(local.keys).union(remote.keys).sorted() where local[key] != remote[key] {
            problems.append(
                "\(key): the store holds \(local[key] ?? "nothing"), the server \(remote[key] ?? "nothing") "
                    + "(store at version \(localVersions[key].map(String.init) ?? "none"), server at \(server[key].map { "\($0.version)" } ?? "none"); "
                    + "answers heard: \(ledger.answers(about: key, user: process.user)))"
            )
        }
        let photos = try await SchedulePhotos.problems(
            store: store,
            client: process.client,
            eager: version2,
            server: await self.server.baseURL,
            token: tokens[process.user]!
        )
        outcome.steps["attachments checked at the end", default: 0] += photos.checked
        problems += photos.problems
        if version2 {
            // The field version 1 does not hold arrives on version 2 as the server has it.
            let localMoods = try await store.database.read { db in
                Dictionary(
                    uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, mood FROM events").map {
                        ("events/\($0[0] as String)", $0[1] as String?)
                    }
                )
            }
            for (key, mood) in localMoods where remote[key] != nil && mood != Self.text(server[key]?.data?["mood"]) {
                problems.append("\(key): the store holds mood \(mood ?? "null"), the server \(Self.text(server[key]?.data?["mood"]) ?? "null")")
            }
        }
        return problems
    }

    /// A live server record as `describe` writes a store's row; `nil` for a tombstone.
    private static func describe(_ change: Change) -> String? {
        guard change.op == .upsert else { return nil }
        let data = change.data ?? [:]
        switch change.entity {
        case "events": return describe(kind: text(data["kind"]), value: text(data["value"]), naturalKey: change.naturalKey)
        case "photos": return SchedulePhotos.describe(caption: text(data["caption"]), photo: text(data["photo"]))
        default: return describe(body: text(data["body"]))
        }
    }

    private static func describe(kind: String?, value: String?, naturalKey: String?) -> String {
        "kind=\(kind ?? "null") value=\(value ?? "null") hk=\(naturalKey ?? "null")"
    }

    private static func describe(body: String?) -> String {
        "body=\(body.map { $0.count > 40 ? "\($0.count) characters" : $0 } ?? "null")"
    }

    private static func text(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let text): text
        case .integer(let number): "\(number)"
        case .none, .null: nil
        case .some(let other): "\(other)"
        }
    }

    /// Every record of `user` on the server, tombstones included, by `entity/entityID`.
    private func serverRecords(of user: String) async throws -> [String: Change] {
        let transport = URLSessionTransport(baseURL: URL(string: await server.baseURL)!)
        var records: [String: Change] = [:]
        // A pull from scratch brings no tombstone: start from a cursor before every change instead.
        let storage = try SQLiteSyncStorage(path: server.databasePath)
        var cursor: String? = storage.cursorBeforeEverything(userID: user)
        try await storage.close()
        while true {
            let query = cursor.map { "?limit=1000&cursor=\($0)" } ?? "?limit=1000"
            let response = try await transport.send(
                TransportRequest(method: "GET", path: "/v1/pull" + query, headers: ["Authorization": "Bearer \(tokens[user]!)"])
            )
            guard response.status == 200 else { throw TestFailure("pull for \(user) answered \(response.status)") }
            let page = try PullResponse.decode(from: response.body)
            for change in page.changes { records["\(change.entity)/\(change.entityID)"] = change }
            guard page.hasMore else { return records }
            cursor = page.cursor
        }
    }

    /// Copies the server's database and every store (`FERRY_FUZZ_KEEP=FOLDER`), to look into a failure.
    private func keepFiles(in folder: URL) {
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let files = [("server", server.databasePath)] + processes.map { ($0.name, $0.path) }
        for (name, path) in files {
            for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
                try? FileManager.default.copyItem(atPath: path + suffix, toPath: folder.appendingPathComponent("\(name).sqlite\(suffix)").path)
            }
        }
        outcome.problems.append("files kept in \(folder.path)")
    }

    private func tearDown() async {
        await freezer.thaw()
        for (_, run) in killed { await run.value }
        for store in killed.map(\.store) + processes.map(\.store) { try? await store.close() }
        try? await server.stop()
    }
}

/// One local write's effect on a record: its state after (`nil` for a delete), or for an
/// update of some columns, those columns.
private struct Effect {
    var record: String
    var state: String?
    var update: String?
    var naturalKey = false
    /// A note's body, which the server's rule judges.
    var body: String? = nil
}

/// What the stores did to one record.
private struct RecordHistory {
    var writers: Set<String> = []
    var naturalKey = false
    /// The record as its last write left it, while one store wrote it; `nil` when deleted.
    var state: String?

    mutating func add(_ effect: Effect, by path: String) {
        writers.insert(path)
        naturalKey = naturalKey || effect.naturalKey
        if let update = effect.update {
            // An update keeps the natural key the row had; only kind and value change.
            let key = state?.components(separatedBy: " hk=").last ?? "null"
            state = "\(update) hk=\(key)"
        } else {
            state = effect.state
        }
    }
}
