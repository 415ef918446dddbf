import Ferry
import FerryProtocol
import FerryTesting
import Foundation

/// docs/DESIGN.md failure 5: 5,000 queued events, 167 of them already on the server under
/// other ids, into a 300-requests-per-minute limit, with progress pushed to the UI.
struct QueuedEventsScenario: DemoScenario {
    let name = "queued-events"
    let title = "5,000 queued health events, 167 already on the server under other ids, rate limit 300 per minute"

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        let known = 167
        try await seedWatch(known, on: server)
        output.say(
            "The watch already uploaded \(known) samples; the phone queued 5,000 while offline, \(known) of them the same samples under its own ids."
        )

        let link = DemoLink(online: false)
        // The story's batches of 500 (the default is the protocol's most, 1,000).
        var batches = SyncConfiguration()
        batches.batchSize = 500
        batches.pullPageSize = 500
        let app = DemoApp(directory: directory.appendingPathComponent("phone"), server: server, connectivity: link, sync: batches)
        try await app.session.signIn("sam")
        try await app.recordHealthEvents(5000, prefix: "phone") { "hk:\($0)" }
        let engine = try await app.engine()
        let updates = await engine.client.statusUpdates()
        let watcher = Task {
            var steps = 0
            for await status in updates {
                guard case .uploading = status.phase else { continue }
                steps += 1
                output.progress(status.progressText)
            }
            return steps
        }

        let origin = Date()
        link.set(online: true)
        // The report reaches the scheduler on a task of its own; a caller that asks for a run
        // while the scheduler still holds the link down is told at once that it is offline.
        while case .waitingForNetwork = await engine.scheduler.state { try await Task.sleep(for: .milliseconds(5)) }
        try await engine.scheduler.run(for: .manual)  // joins the run the returning link asks for
        let journal = try await app.journal(since: origin)
        let wholeJournal = try await app.journal(since: .distantPast)  // the offline spell too, for the report
        let status = await engine.client.status
        let local = try await engine.store.database.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM health_events") ?? 0,
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM health_events WHERE id LIKE 'watch-%'") ?? 0
            )
        }
        try await app.session.signOut()
        let progressUpdates = await watcher.value

        DemoTimeline.narrate(journal, since: origin, to: output)
        let merged = journal.filter { $0.kind == .runFinished }.compactMap { $0[.merged].flatMap(Int.init) }.reduce(0, +)
        let remote = try await server.records(of: "sam")
        let pushes = app.wire.count(Endpoint.push)
        let limited = app.wire.count(status: 429)
        return ScenarioOutcome(
            metrics: [
                "pushRequests": pushes, "pullRequests": app.wire.count(Endpoint.pull), "rateLimited": limited, "merged": merged,
                "pending": status.pending, "progressUpdates": progressUpdates, "serverRecords": remote.count,
            ],
            checks: [
                ("5,000 events in \(pushes) push requests (one request each would be 5,000 into a 300/min limit)", pushes <= 10),
                ("\(limited) answers 429", limited == 0),
                (
                    "\(merged) merged into the watch's records and re-keyed locally (\(local.1) local rows now carry the watch's ids)",
                    merged == known && local.1 == known
                ),
                (
                    "\(status.pending) left queued; the server holds \(remote.count) records, the phone \(local.0)",
                    status.pending == 0 && remote.count == 5000 && local.0 == 5000
                ),
                ("the status stream pushed \(progressUpdates) progress updates, nobody polled", progressUpdates >= 10),
            ],
            timelines: [.init(title: "sam", events: wholeJournal)]
        )
    }

    /// The watch already uploaded `known` samples, each with its natural key.
    private func seedWatch(_ known: Int, on server: FerryTestServer) async throws {
        try await server.seed(
            user: "sam",
            client: "watch",
            mutations: (0..<known).map { index in
                .upsert(
                    id: Int64(index + 1),
                    entity: "health_events",
                    entityID: "watch-\(index)",
                    data: ["kind": .string("steps"), "value": .integer(Int64(index))],
                    naturalKey: "hk:\(index * 30)"
                )
            }
        )
    }
}
