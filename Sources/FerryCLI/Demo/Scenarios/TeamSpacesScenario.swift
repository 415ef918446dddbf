import Ferry
import FerryProtocol
import FerryTesting
import Foundation
import GRDB

/// Shared spaces (PROTOCOL.md, "Spaces"): a company's backend fills a read-only space every
/// employee downloads; a dispatcher and a field worker share a team's projects and edit the
/// same one from two phones; the worker, offline with an edit queued, is removed from the team.
struct TeamSpacesScenario: DemoScenario {
    let name = "team-spaces"
    let title =
        "Shared spaces: a company's 2,000 aliases read-only, a team's projects on two phones, jobs reaching a tablet live, a worker removed while offline"

    static let projects = SyncedTable(table: "projects", space: .column("team_id"))
    static let aliases = SyncedTable(table: "aliases", space: .named("company"))
    static let notes = SyncedTable(table: "notes")

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    /// A phone of `user`: its own store with the team app's tables, and a client.
    private func phone(_ user: String, in directory: URL, server: FerryTestServer) throws -> FerryClient {
        let store = try FerryStore(
            path: directory.appendingPathComponent("\(user).sqlite").path,
            schema: Self.schema,
            tables: [Self.projects, Self.aliases, Self.notes]
        )
        return FerryClient(store: store, transport: server.transport(), token: server.tokenProvider(for: user))
    }

    /// A device of `user` that an app runs with a session: the server's event stream open, so
    /// another device's change starts a run at once.
    private func liveDevice(_ user: String, in directory: URL, server: FerryTestServer) async throws -> SyncSession {
        let configuration = SessionConfiguration(
            storeDirectory: directory.appendingPathComponent("\(user)-tablet"),
            tables: [Self.projects, Self.aliases, Self.notes],
            schema: Self.schema
        )
        let session = SyncSession(configuration: configuration, transport: server.transport(), token: { user in try await server.token(for: user) })
        try await session.signIn(user)
        return session
    }

    /// The team app's tables.
    private static var schema: DatabaseMigrator {
        var schema = DatabaseMigrator()
        schema.registerMigration("team-app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, title TEXT, status TEXT);
                    CREATE TABLE aliases (id TEXT PRIMARY KEY NOT NULL, street TEXT, alias TEXT);
                    CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
                    """
            )
        }
        return schema
    }

    private func count(_ sql: String, on client: FerryClient) async throws -> Int {
        try await client.store.database.read { db in try Int.fetchOne(db, sql: sql) ?? 0 }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        let origin = Date()
        try await companyBackend(server: server, output: output)

        // The dispatcher makes the team and its projects; the worker joins.
        let dispatcher = try phone("dispatcher", in: directory, server: server)
        let worker = try phone("worker", in: directory, server: server)
        try await makeTeam(by: dispatcher)
        let firstPull = try await worker.sync().pull
        let aliasesOnPhone = try await count("SELECT count(*) FROM aliases", on: worker)
        let projectsOnPhone = try await count("SELECT count(*) FROM projects WHERE team_id = 'team-7'", on: worker)
        output.say(
            "The worker's phone joins: \(aliasesOnPhone.formatted()) aliases and \(projectsOnPhone) team projects in one sync of \(firstPull.requests) pages."
        )
        let readOnlyRefused = try await renameAlias(on: worker, output: output)

        let (dispatcherP1, workerP1) = try await editTogether(dispatcher, worker, output: output)

        let latencies = try await liveBoard(of: dispatcher, directory: directory, server: server, output: output)
        let liveMedian = latencies.sorted()[latencies.count / 2]
        let liveArrived = latencies.allSatisfy { $0 < 5000 }

        // Offline, the worker edits p2 and writes a note; the dispatcher removes them from the team.
        try await worker.store.database.write { db in
            try db.execute(sql: "UPDATE projects SET status = 'blocked' WHERE id = 'p2'")
            try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n1', 'gate code 4411')")
        }
        try await dispatcher.removeMember("worker", from: "team-7")
        output.say("Offline, the worker marks p2 blocked and writes a note; meanwhile the dispatcher removes them from team-7.")
        let workerOrigin = Date()
        try await worker.sync()
        let workerJournal = try await worker.journal.events().filter { $0.at >= origin }
        DemoTimeline.narrate(workerJournal, since: workerOrigin, to: output, limit: 8)
        let deadLetters = try await worker.deadLetters()
        let projectsAfter = try await count("SELECT count(*) FROM projects", on: worker)
        let aliasesAfter = try await count("SELECT count(*) FROM aliases", on: worker)
        let workerRemote = try await server.records(of: "worker")
        let dispatcherRemote = try await server.records(of: "dispatcher")
        let p2 = dispatcherRemote["team-7:projects/p2"]?.data?["status"]
        let dispatcherJournal = try await dispatcher.journal.events().filter { $0.at >= origin }
        return ScenarioOutcome(
            metrics: [
                "aliases": aliasesOnPhone, "teamProjects": projectsOnPhone, "projectsAfterRemoval": projectsAfter,
                "aliasesAfterRemoval": aliasesAfter, "deadLetters": deadLetters.count, "firstPullPages": firstPull.requests,
                "liveMedianMilliseconds": Int(liveMedian.rounded()),
            ],
            checks: [
                (
                    "the worker's phone downloaded the company's 2,000 aliases and the team's 5 projects",
                    aliasesOnPhone == 2000 && projectsOnPhone == 5
                ),
                ("a write to the read-only company space was refused in the app's transaction", readOnlyRefused),
                (
                    String(
                        format: "the dispatcher's 5 assignments reached the worker's tablet live (median %.0f ms after the push was acknowledged)",
                        liveMedian
                    ),
                    liveArrived
                ),
                (
                    "both phones converged on p1 with both edits ('Site 1, roof/done')",
                    dispatcherP1 == "Site 1, roof/done" && workerP1 == dispatcherP1
                ),
                (
                    "removed while offline: the team's rows left the phone (\(projectsAfter) left), the aliases stayed (\(aliasesAfter))",
                    projectsAfter == 0 && aliasesAfter == 2000
                ),
                (
                    "the queued edit of p2 became a dead letter naming team-7 (\(deadLetters.count)); the server's p2 is untouched",
                    deadLetters.count == 1 && deadLetters.first?.reason.contains("team-7") == true && p2 == .string("open")
                ),
                ("nothing else was lost: the worker's note reached the server", workerRemote["notes/n1"] != nil),
            ],
            timelines: [.init(title: "dispatcher", events: dispatcherJournal), .init(title: "worker", events: workerJournal)]
        )
    }

    /// The company's backend, with a service token: the reference space, read by everyone.
    private func companyBackend(server: FerryTestServer, output: DemoOutput) async throws {
        let backend = server.transport()
        let service = try await server.token(for: "backend", service: true)
        for (method, path, body) in [
            ("PUT", Endpoint.spaces + "/company", nil), ("PUT", Endpoint.spaces + "/company/members/dispatcher", #"{"role":"read"}"#),
            ("PUT", Endpoint.spaces + "/company/members/worker", #"{"role":"read"}"#),
        ] as [(String, String, String?)] {
            let response = try await backend.send(
                TransportRequest(method: method, path: path, headers: ["Authorization": "Bearer \(service)"], body: body.map { Data($0.utf8) })
            )
            guard (200..<300).contains(response.status) else { throw CommandFailure("\(method) \(path) answered \(response.status)") }
        }
        try await server.seed(
            user: "backend",
            client: "company-import",
            mutations: (1...2000).map {
                Mutation(
                    id: Int64($0),
                    entity: "aliases",
                    entityID: "alias-\($0)",
                    op: .upsert,
                    data: ["street": .string("\($0) Harbour Road"), "alias": .string("Dock \($0)")],
                    space: "company"
                )
            },
            service: true
        )
        output.say("The company's backend writes 2,000 address aliases into the read-only space 'company' with a service token.")
    }

    /// Both phones edit project p1; each sync brings the other's. Returns p1 on each.
    private func editTogether(_ dispatcher: FerryClient, _ worker: FerryClient, output: DemoOutput) async throws -> (String?, String?) {
        try await dispatcher.store.database.write { db in try db.execute(sql: "UPDATE projects SET title = 'Site 1, roof' WHERE id = 'p1'") }
        try await dispatcher.sync()
        try await worker.sync()
        try await worker.store.database.write { db in try db.execute(sql: "UPDATE projects SET status = 'done' WHERE id = 'p1'") }
        try await worker.sync()
        try await dispatcher.sync()
        let read = "SELECT title || '/' || status FROM projects WHERE id = 'p1'"
        let dispatcherP1 = try await dispatcher.store.database.read { db in try String.fetchOne(db, sql: read) }
        let workerP1 = try await worker.store.database.read { db in try String.fetchOne(db, sql: read) }
        output.say("Both phones edit project p1: the dispatcher holds '\(dispatcherP1 ?? "-")', the worker '\(workerP1 ?? "-")'.")
        return (dispatcherP1, workerP1)
    }

    /// The worker's tablet keeps the team's board live while the dispatcher assigns jobs: each
    /// job's time from the push's acknowledgement to the tablet's table, in milliseconds.
    private func liveBoard(of dispatcher: FerryClient, directory: URL, server: FerryTestServer, output: DemoOutput) async throws -> [Double] {
        let tablet = try await liveDevice("worker", in: directory, server: server)
        guard let board = await tablet.engine else { throw CommandFailure("the tablet did not sign in") }
        try await board.scheduler.initialSync()
        var latencies: [Double] = []
        for job in 1...5 {
            try await dispatcher.store.database.write { db in
                try db.execute(
                    sql: "INSERT INTO projects (id, team_id, title, status) VALUES (?, 'team-7', ?, 'assigned to worker')",
                    arguments: ["job-\(job)", "Job \(job)"]
                )
            }
            try await dispatcher.sync()
            let acknowledged = ContinuousClock.now
            // Nobody asks the tablet to sync: only the server's event can bring the job.
            while try await board.store.database.read({ db in
                try Bool.fetchOne(db, sql: "SELECT 1 FROM projects WHERE id = ?", arguments: ["job-\(job)"])
            }) == nil,
                acknowledged.duration(to: .now) < .seconds(5)
            {
                try await Task.sleep(for: .milliseconds(1))
            }
            latencies.append(acknowledged.duration(to: .now).seconds * 1000)
            try await Task.sleep(for: .milliseconds(300))  // a dispatcher's pace
        }
        try await tablet.signOut()
        let liveMedian = latencies.sorted()[latencies.count / 2]
        output.say(
            String(
                format:
                    "The dispatcher assigns 5 jobs; each reaches the worker's tablet live, with no sync asked for: median %.0f ms, slowest %.0f ms.",
                liveMedian,
                latencies.max() ?? 0
            )
        )
        return latencies
    }

    /// The dispatcher makes team-7, with the worker a writer, and its five projects.
    private func makeTeam(by dispatcher: FerryClient) async throws {
        try await dispatcher.createSpace("team-7")
        try await dispatcher.setRole(.write, of: "worker", in: "team-7")
        try await dispatcher.store.database.write { db in
            for index in 1...5 {
                try db.execute(
                    sql: "INSERT INTO projects (id, team_id, title, status) VALUES (?, 'team-7', ?, 'open')",
                    arguments: ["p\(index)", "Site \(index)"]
                )
            }
        }
        try await dispatcher.sync()
    }

    /// The worker's app tries to rename an alias of the read-only company space; returns whether
    /// the app's transaction refused it, naming the space.
    private func renameAlias(on worker: FerryClient, output: DemoOutput) async throws -> Bool {
        do {
            try await worker.store.database.write { db in try db.execute(sql: "UPDATE aliases SET alias = 'Mine' WHERE id = 'alias-1'") }
            return false
        } catch let error as DatabaseError {
            output.say("The worker's app tries to rename an alias: refused at once (\(error.message ?? "")).")
            return error.message?.contains("space 'company'") == true
        }
    }
}
