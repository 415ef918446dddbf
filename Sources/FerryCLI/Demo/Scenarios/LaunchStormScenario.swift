import Ferry
import FerryProtocol
import FerryTesting
import Foundation

/// docs/DESIGN.md failure 1 and 2: the launch storm, through a startup pipeline.
struct LaunchStormScenario: DemoScenario {
    let name = "launch-storm"
    let title = "Launch storm: 296 records on the server; launch, the monitor's first report, became active and three link flaps within 100 ms"

    struct CacheUnavailable: Error, CustomStringConvertible {
        var description: String { "cache server unreachable" }
    }

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await seedFromTheWeb(on: server)
        output.say("The server holds 100 projects, 100 tasks and 96 calendar events for maya, written from the web.")

        let link = DemoLink(online: true)
        let app = DemoApp(directory: directory.appendingPathComponent("phone"), server: server, connectivity: link)
        let pipeline = StartupPipeline(steps: [
            .signedIn(app.session),
            // 30 s in a real app; 300 ms here so the demo stays short.
            .optional("Location permission", timeout: .milliseconds(300)) { _ in
                try await Task.sleep(for: .seconds(30))  // nobody answers the dialog
            },
            .optional("Warm the map cache") { _ in throw CacheUnavailable() },
            .initialSync(app.session, weight: 4),
        ])
        // What the app's start-up screen showed, kept for the report's progress lane.
        let progressWatcher = Task {
            var shown: [JournalEvent] = []
            for await progress in await pipeline.progressUpdates() where progress.phase != .idle {
                let line = "Starting up: \(Int(progress.fraction * 100))% \(progress.message)"
                guard line != shown.last?.message else { continue }
                output.progress(line)
                shown.append(JournalEvent(kind: .progress, message: line))
            }
            return shown
        }

        let origin = Date()
        await pipeline.start()
        try await app.session.signIn("maya")  // the launch trigger, and the monitor's first report
        let engine = try await app.engine()
        await app.session.trigger(.becameActive)
        for _ in 0..<3 {
            try await Task.sleep(for: .milliseconds(15))
            link.set(online: false)
            try await Task.sleep(for: .milliseconds(15))
            link.set(online: true)
        }
        let startup = await pipeline.completion()
        progressWatcher.cancel()
        let startupShown = await progressWatcher.value
        // Anything still coalescing would start within a settle window; give it one.
        try await Task.sleep(for: .milliseconds(300))
        let history = await engine.scheduler.history
        let journal = try await app.journal(since: origin)
        try await app.session.signOut()
        // Each trigger ends ignored or served by a run (a waiting or queued one is recorded again then).
        let triggers = journal.filter { $0.kind == .trigger && ["ignored", "startedRun", "coalescedIntoRun"].contains($0[.fate] ?? "") }
            .count

        DemoTimeline.narrate(journal, since: origin, to: output)
        for (step, outcome) in startup.outcomes {
            output.say("startup step \"\(step)\": \(outcome)")
        }
        let runs = history.filter { if case .startedRun = $0.1 { true } else { false } }.count
        let followUps = history.filter { if case .queuedAfterRun = $0.1 { true } else { false } }.count
        let pulled = journal.filter { $0.kind == .runFinished }.compactMap { $0[.pulled].flatMap(Int.init) }.reduce(0, +)
        let requests = app.wire.count(Endpoint.prefix)
        let skipped = startup.outcomes.filter { if case .skipped = $0.outcome { true } else { false } }.map(\.step)
        return ScenarioOutcome(
            metrics: [
                "triggers": triggers, "runs": runs, "recordsPulled": pulled, "pullRequests": app.wire.count(Endpoint.pull),
                "pushRequests": app.wire.count(Endpoint.push), "requests": requests,
            ],
            checks: [
                ("\(triggers) triggers made \(runs) sync run (the app this comes from made 2 to 4)", runs == 1 && followUps == 0),
                ("\(pulled) records pulled, exactly the 296 needed (it processed about 900)", pulled == 296),
                (
                    "startup finished; the permission timeout and the cache failure were skipped with their reasons",
                    startup.phase == .finished && skipped == ["Location permission", "Warm the map cache"]
                ),
            ],
            timelines: [.init(title: "maya", events: (journal + startupShown).sorted { $0.at < $1.at })]
        )
    }

    /// The records maya wrote from the web: 100 projects, 100 tasks and 96 calendar events.
    private func seedFromTheWeb(on server: FerryTestServer) async throws {
        var seed: [Mutation] = []
        for (entity, count) in [("projects", 100), ("tasks", 100), ("calendar_events", 96)] {
            for index in 0..<count {
                seed.append(
                    .upsert(id: Int64(seed.count + 1), entity: entity, entityID: "\(entity)-\(index)", data: ["title": .string("\(entity) \(index)")])
                )
            }
        }
        try await server.seed(user: "maya", client: "web", mutations: seed)
    }
}
