import Ferry
import FerryProtocol
import FerryTesting
import Foundation

/// Lost responses, resets, 429 and 503 (and 500) at random: everything arrives exactly once.
struct HostileNetworkScenario: DemoScenario {
    let name = "hostile-network"
    let title = "A hostile network: lost responses, resets, 429, 503 and 500 on 37% of requests"

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: nil) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        var sync = SyncConfiguration()
        sync.batchSize = 50
        // Waits are short here so the demo stays short; a real app keeps the defaults.
        sync.retry = RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200), maximumAttempts: 40)
        var faults: FaultInjectingTransport?
        let app = DemoApp(directory: directory.appendingPathComponent("phone"), server: server, sync: sync) { base in
            let hostile = FaultInjectingTransport(base, seed: 2)  // a seed that meets every kind of fault
            faults = hostile
            return hostile
        }
        guard let faults else { throw CommandFailure("the demo's network was not set up") }
        try await app.session.signIn("kim")
        let origin = Date()
        try await app.recordHealthEvents(1000, prefix: "kim") { "hk:kim:\($0)" }
        let engine = try await app.engine()
        let watcher = Task {
            for await status in await engine.client.statusUpdates() {
                if case .uploading = status.phase { output.progress(status.progressText) }
            }
        }
        var runs = 0
        // A run that gives up after its retries is followed by another, as the scheduler would on the next trigger.
        while true {
            runs += 1
            do {
                try await engine.scheduler.run(for: .manual)
                break
            } catch  where runs < 10 {
                output.say("run \(runs) gave up: \(error); asking for another")
            }
        }
        watcher.cancel()
        let status = await engine.client.status
        let journal = try await app.journal(since: origin)
        try await app.session.signOut()

        let injected = faults.injectedFaults
        output.say("Faults injected: " + injected.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", "))
        let waits = journal.filter { $0.kind == .wait }.count
        output.say("\(app.wire.count(Endpoint.prefix)) requests, \(waits) waits (Retry-After or backoff with jitter)")
        let remote = try await server.records(of: "kim")
        let appliedTwice = remote.values.filter { $0.version > 1 }.count
        let lost = injected["lost response", default: 0]
        return ScenarioOutcome(
            metrics: [
                "pushRequests": app.wire.count(Endpoint.push), "pullRequests": app.wire.count(Endpoint.pull),
                "rateLimited": injected["429", default: 0], "lostResponses": lost, "resets": injected["reset", default: 0],
                "unavailable": injected["503", default: 0], "pending": status.pending, "serverRecords": remote.count,
                "appliedTwice": appliedTwice, "runs": runs,
            ],
            checks: [
                ("every kind of fault met: \(lost) lost responses among them", injected.count == 5 && lost > 0),
                ("\(remote.count) of 1,000 records on the server, \(status.pending) pending", remote.count == 1000 && status.pending == 0),
                ("\(appliedTwice) mutations applied twice (every record at version 1)", appliedTwice == 0),
            ],
            timelines: [.init(title: "kim", events: journal)]
        )
    }
}
