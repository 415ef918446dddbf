import Ferry
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB

/// One seeded run of two users' devices sharing a space through faults, ending in one invariant.
///
/// Alice administers the space `team`; Bob writes in it, and mid-run (by requests that are not
/// faulted: the faults are the devices') is removed and granted again, demoted to reader and
/// made writer again, retries his dead letters, and Alice deletes `team` and creates it again
/// under the same id (another space). Each device
/// writes projects of the team (`team_id = 'team'`: some only Alice writes, some only Bob,
/// some both) and personal notes, syncs alone or beside the other, and the server restarts
/// now and then; every request of a device may be dropped, reset, lost after the commit,
/// rate limited or answered 500 or 503. At the end, with faults off, each device syncs until
/// caught up, and: nothing is queued, in flight or leased; a member's store holds exactly the
/// team's projects the server holds, at the server's versions (no refused change left as a row
/// that differs), and a non-member's none; each store's notes are its user's on the server; a
/// project only Alice wrote in the space of today is on the server as she last wrote it; no
/// change made in a deleted space landed in the space created after it; and every dead letter
/// is a team change, with a reason naming the space.
final class SpaceFaultSchedule {
    struct Outcome {
        var steps: [String: Int] = [:]
        var problems: [String] = []
        var log: [String] = []
    }

    private struct Device {
        let user: String
        let store: FerryStore
        let client: FerryClient
        let transport: ScheduleTransport
    }

    private var random: JitterGenerator
    private let server = RestartableServer()
    private let ledger = ScheduleLedger()
    private let freezer = Freezer()
    private var devices: [Device] = []
    private var bobIsMember = true
    private var bobWrites = true
    /// How many times Alice deleted `team` and created it again.
    private var recreations = 0
    /// The incarnation of `team` each team write was bound to (the writing store's last seen).
    private var boundTo: [String: String?] = [:]
    private var counter = 0
    /// Alice's own projects, each write in order with the incarnation it was bound to (`nil` state: deleted).
    private var alicesWrites: [(id: String, state: String?, incarnation: String?)] = []
    private var outcome = Outcome()

    private init(seed: UInt64) { random = JitterGenerator(seed: seed) }

    static func run(seed: UInt64) async -> Outcome {
        let schedule = SpaceFaultSchedule(seed: seed)
        do {
            try await schedule.play()
        } catch {
            schedule.outcome.problems.append("the schedule stopped: \(error)")
        }
        await schedule.freezer.thaw()
        for device in schedule.devices { try? await device.store.close() }
        try? await schedule.server.stop()
        schedule.outcome.log = schedule.ledger.logLines
        return schedule.outcome
    }

    private func roll(_ range: Range<Int>) -> Int { Int.random(in: range, using: &random) }

    private func note(_ step: String, _ detail: String) {
        outcome.steps[step, default: 0] += 1
        ledger.log("\(step): \(detail)")
    }

    /// A request to the server outside the devices' networks.
    private func manage(_ method: String, _ path: String, as user: String, body: String? = nil) async throws {
        let transport = URLSessionTransport(baseURL: URL(string: await server.baseURL)!)
        var headers = ["Authorization": "Bearer \(try await TestServer.token(for: user))"]
        if body != nil { headers["Content-Type"] = "application/json" }
        let response = try await transport.send(TransportRequest(method: method, path: path, headers: headers, body: body.map { Data($0.utf8) }))
        guard (200..<300).contains(response.status) else { throw TestFailure("\(method) \(path) answered \(response.status)") }
    }

    private func play() async throws {
        try await server.start()
        try await manage("PUT", "/v1/spaces/team", as: "alice")
        try await manage("PUT", "/v1/spaces/team/members/bob", as: "alice", body: #"{"role":"write"}"#)
        var configuration = SyncConfiguration()
        configuration.batchSize = Int.random(in: 2...8, using: &random)
        configuration.pullPageSize = Int.random(in: 2...8, using: &random)
        for user in ["alice", "bob"] {
            let store = try SpaceClientTests.openStore("\(user)-\(random.next())")
            let transport = ScheduleTransport(user: user, name: user, seed: random.next(), server: server, ledger: ledger, freezer: freezer)
            let client = FerryClient(
                store: store,
                transport: transport,
                token: { try await TestServer.token(for: user) },
                clock: FastClock(),
                configuration: configuration,
                jitterSeed: random.next()
            )
            devices.append(Device(user: user, store: store, client: client, transport: transport))
        }
        for _ in 0..<(20 + roll(0..<20)) {
            let device = devices[roll(0..<2)]
            switch roll(0..<100) {
            case ..<42: try await write(on: device)
            case ..<66: await sync(device)
            case ..<74:
                await withTaskGroup(of: Void.self) { group in
                    for device in devices { group.addTask { _ = try? await device.client.sync() } }
                }
                note("syncs side by side", "alice + bob")
            case ..<82:
                if bobIsMember {
                    try await manage("DELETE", "/v1/spaces/team/members/bob", as: "alice")
                } else {
                    try await manage("PUT", "/v1/spaces/team/members/bob", as: "alice", body: #"{"role":"write"}"#)
                    bobWrites = true
                }
                bobIsMember.toggle()
                note(bobIsMember ? "bob granted" : "bob removed", "by alice")
            case ..<86 where bobIsMember:
                bobWrites.toggle()
                try await manage("PUT", "/v1/spaces/team/members/bob", as: "alice", body: bobWrites ? #"{"role":"write"}"# : #"{"role":"read"}"#)
                note(bobWrites ? "bob made writer" : "bob demoted", "by alice")
            case ..<90:
                let retried = (try? await devices[1].client.retryDeadLetters()) ?? 0
                note("dead letters retried", "bob: \(retried)")
            case ..<93:
                try await manage("DELETE", "/v1/spaces/team", as: "alice")
                try await manage("PUT", "/v1/spaces/team", as: "alice")
                recreations += 1
                bobIsMember = roll(0..<2) == 0
                bobWrites = true
                if bobIsMember { try await manage("PUT", "/v1/spaces/team/members/bob", as: "alice", body: #"{"role":"write"}"#) }
                note("space deleted and created again", "by alice; bob \(bobIsMember ? "granted" : "not a member")")
            default:
                try await server.restart()
                note("server restarted", "between steps")
            }
        }
        try await finish()
    }

    /// One to three changes in one transaction: a team project (Alice's own, Bob's own, or one
    /// both edit) created, edited or deleted, or a personal note.
    private func write(on device: Device) async throws {
        var statements: [(String, StatementArguments)] = []
        var alices: [(String, String?)] = []
        var teamStamps: [String] = []
        for _ in 0...roll(0..<3) {
            counter += 1
            let stamp = "\(device.user)-\(counter)"
            switch roll(0..<100) {
            case ..<70:
                let owner = ["a", "b", "s"][roll(0..<3)]
                guard owner != "a" || device.user == "alice", owner != "b" || device.user == "bob" else { continue }
                let id = "\(owner)-\(roll(0..<4))"
                if roll(0..<5) == 0 {
                    statements.append(("DELETE FROM projects WHERE id = ?", [id]))
                    if owner == "a" { alices.append((id, nil)) }
                } else {
                    statements.append(
                        (
                            "INSERT INTO projects (id, team_id, name) VALUES (?, 'team', ?) ON CONFLICT (id) DO UPDATE SET name = excluded.name",
                            [id, stamp]
                        )
                    )
                    teamStamps.append(stamp)
                    if owner == "a" { alices.append((id, stamp)) }
                }
            default:
                statements.append(
                    ("INSERT INTO notes (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body", ["n-\(roll(0..<3))", stamp])
                )
            }
        }
        let batch = statements
        let incarnation: String?
        do {
            incarnation = try await device.store.database.write { db in
                for (sql, arguments) in batch { try db.execute(sql: sql, arguments: arguments) }
                return try String.fetchOne(db, sql: "SELECT incarnation FROM ferry_space_incarnations WHERE space = 'team'")
            }
        } catch FerryError.Code.readOnlySpace {
            // The store knows the space is read-only for this user: the app's transaction rolled back whole.
            note("write refused", "\(device.user): the space is read-only")
            return
        }
        for stamp in teamStamps { boundTo[stamp] = incarnation }
        for (id, state) in alices { alicesWrites.append((id, state, incarnation)) }
        note("write", "\(device.user): \(statements.map { "\($0.0.prefix(6)) \($0.1)" }.joined(separator: "; "))")
    }

    private func sync(_ device: Device) async {
        do {
            let report = try await device.client.sync()
            note("sync", "\(device.user): pushed \(report.upload.acknowledged), pulled \(report.pull.received)")
        } catch {
            note("sync", "\(device.user): failed (\(error))")
        }
    }

    private func finish() async throws {
        try await server.start()
        for device in devices { device.transport.turnFaultsOff() }
        for round in 0..<3 {
            for device in devices {
                do {
                    try await device.client.sync()
                } catch  where round == 2 {
                    outcome.problems.append("\(device.user): the last sync without faults failed: \(error)")
                } catch {}
            }
        }
        let team = try await records(as: "alice").filter { $0.key.hasPrefix("team:") && $0.value.op == .upsert }
        for device in devices {
            let member = device.user == "alice" || bobIsMember
            let (queued, leases, projects, versions, notes) = try await device.store.database.read { db in
                (
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state IN (0, 1)") ?? 0,
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_lease") ?? 0,
                    Dictionary(
                        uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, name FROM projects").map { ($0[0] as String, $0[1] as String?) }
                    ),
                    Dictionary(
                        uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT entity_id, version FROM ferry_versions WHERE entity = 'projects'").map
                        {
                            ($0[0] as String, $0[1] as Int64)
                        }
                    ),
                    Dictionary(
                        uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, body FROM notes").map { ($0[0] as String, $0[1] as String?) }
                    )
                )
            }
            if queued != 0 { outcome.problems.append("\(device.user): \(queued) changes still queued or in flight") }
            if leases != 0 { outcome.problems.append("\(device.user): the sync lease is still held") }
            let expected =
                member ? team.reduce(into: [String: String?]()) { $0[String($1.key.dropFirst("team:projects/".count))] = Self.name($1.value) } : [:]
            // Every row is the server's: a refused change is a dead letter, not a row that differs.
            let dead = try await device.client.deadLetters()
            let extra = Set(projects.keys).subtracting(expected.keys)
            let differing = expected.filter { projects[$0.key] != $0.value }
            if !extra.isEmpty || !differing.isEmpty {
                let wrong = differing.map {
                    "\($0.key): the store \(projects[$0.key].map { $0 ?? "null" } ?? "nothing"), the server \($0.value ?? "null")"
                }
                outcome.problems.append(
                    "\(device.user) (member: \(member)): rows the server does not hold \(extra.sorted()); \(wrong.sorted()) (dead letters: \(dead.map(\.entityID).sorted()))"
                )
            }
            if member {
                for (key, change) in team where versions[String(key.dropFirst("team:projects/".count))] != change.version {
                    outcome.problems.append(
                        "\(device.user): \(key) known at version \(versions[String(key.dropFirst("team:projects/".count))].map(String.init) ?? "none"), the server holds \(change.version)"
                    )
                }
            }
            let remoteNotes = try await records(as: device.user).filter { $0.key.hasPrefix("notes/") && $0.value.op == .upsert }
            let expectedNotes = remoteNotes.reduce(into: [String: String?]()) {
                $0[String($1.key.dropFirst("notes/".count))] = Self.text($1.value.data?["body"])
            }
            if notes != expectedNotes { outcome.problems.append("\(device.user): notes \(notes) against the server's \(expectedNotes)") }
            if dead.contains(where: { $0.entity != "projects" || !$0.reason.contains("team") }) {
                outcome.problems.append(
                    "\(device.user): dead letters that are not team changes naming the space: \(dead.map { "\($0.entity)/\($0.entityID): \($0.reason)" })"
                )
            }
        }
        // The space of today, and what was written in it by whom.
        let current = try await currentIncarnation()
        var alicesProjects: [String: String?] = [:]
        for write in alicesWrites where write.incarnation == current { alicesProjects[write.id] = write.state }
        for (id, state) in alicesProjects {
            let remote = team["team:projects/\(id)"].flatMap(Self.name)
            if remote != state {
                outcome.problems.append(
                    "projects/\(id), written by Alice only, was last \(state ?? "deleted"); the server holds \(remote ?? "nothing")"
                )
            }
        }
        for (key, change) in team {
            guard let stamp = Self.name(change), let bound = boundTo[stamp], let bound, bound != current else { continue }
            outcome.problems.append("\(key) holds \(stamp), a change made in an earlier space 'team' (\(bound); today's is \(current ?? "none"))")
        }
    }

    /// The incarnation of the space `team` Alice administers now.
    private func currentIncarnation() async throws -> String? {
        let transport = URLSessionTransport(baseURL: URL(string: await server.baseURL)!)
        let response = try await transport.send(
            TransportRequest(method: "GET", path: "/v1/spaces", headers: ["Authorization": "Bearer \(try await TestServer.token(for: "alice"))"])
        )
        return try JSONDecoder().decode(SpaceList.self, from: response.body).spaces.first { $0.space == "team" }?.incarnation
    }

    /// The live records `user` reads on the server, by `entity/entityID` (`space:entity/entityID` in a space).
    private func records(as user: String) async throws -> [String: Change] {
        let transport = URLSessionTransport(baseURL: URL(string: await server.baseURL)!)
        let token = try await TestServer.token(for: user)
        var records: [String: Change] = [:]
        var cursor: String?
        while true {
            let query = "?limit=1000" + (cursor.map { "&cursor=\($0)" } ?? "")
            let response = try await transport.send(
                TransportRequest(method: "GET", path: "/v1/pull" + query, headers: ["Authorization": "Bearer \(token)"])
            )
            guard response.status == 200 else { throw TestFailure("pull for \(user) answered \(response.status)") }
            let page = try PullResponse.decode(from: response.body)
            for change in page.changes { records[(change.space.map { "\($0):" } ?? "") + "\(change.entity)/\(change.entityID)"] = change }
            guard page.hasMore else { return records }
            cursor = page.cursor
        }
    }

    private static func name(_ change: Change) -> String? { text(change.data?["name"]) }

    private static func text(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { text } else { nil }
    }
}
