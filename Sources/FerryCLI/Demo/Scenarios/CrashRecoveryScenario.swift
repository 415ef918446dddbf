import Ferry
import FerryProtocol
import FerryTesting
import Foundation
import GRDB

/// docs/DESIGN.md failure 3: the app dies in the middle of a batch. The server has committed
/// it, the response never arrives, the entries are left "in flight" in the file.
struct CrashRecoveryScenario: DemoScenario {
    let name = "crash-recovery"
    let title = "Crash mid-upload: the app dies after the server committed a batch and before the answer arrived"

    /// Passes requests to the server; on push number `crashAt`, lets the server commit and
    /// then never returns, as if the process had died while waiting for the answer.
    final class DyingNetwork: SyncTransport, @unchecked Sendable {
        // @unchecked: `pushes` is only touched under `lock`; the stream is Sendable.
        private let base: any SyncTransport
        private let crashAt: Int
        private let lock = NSLock()
        private var pushes = 0
        private let (afterlife, end) = AsyncStream.makeStream(of: Never.self)
        let (crashed, crash) = AsyncStream.makeStream(of: Void.self)

        init(_ base: any SyncTransport, crashAt: Int) {
            self.base = base
            self.crashAt = crashAt
        }

        func send(_ request: TransportRequest) async throws -> TransportResponse {
            let number =
                request.path == Endpoint.push
                ? lock.withLock {
                    pushes += 1
                    return pushes
                } : 0
            let response = try await base.send(request)
            guard number == crashAt else { return response }
            crash.yield()
            for await _ in afterlife {}  // the process is gone: nothing below ever runs for it
            throw CancellationError()
        }

        /// Lets the dead process's task end once the demo has its verdict.
        func bury() { end.finish() }
    }

    /// Batches of 500, so that 2,000 events make four pushes and the third can die (the
    /// default is the protocol's most, 1,000).
    static var batches: SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.batchSize = 500
        return configuration
    }

    /// The id of a process that has ended, for the dying app's lease.
    static func endedProcessID() throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/true")
        try process.run()
        process.waitUntilExit()
        return process.processIdentifier
    }

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        let phone = directory.appendingPathComponent("phone")
        var dying: DyingNetwork?
        let first = DemoApp(directory: phone, server: server, sync: Self.batches) { base in
            let network = DyingNetwork(base, crashAt: 3)
            dying = network
            return network
        }
        guard let dying else { throw CommandFailure("the demo's network was not set up") }
        let origin = Date()
        try await first.session.signIn("lee")
        try await first.recordHealthEvents(2000, prefix: "lee") { "hk:lee:\($0)" }
        var crashed = dying.crashed.makeAsyncIterator()
        _ = await crashed.next()
        let file = phone.appendingPathComponent(StoreLocation.fileName(forUser: "lee")).path  // the store the session keeps for lee
        // The dying app's tasks may still be writing to the file (its journal, a lease renewal):
        // wait for their transactions as the app's own store would, instead of failing at once.
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let states = try await DatabaseQueue(path: file, configuration: configuration).write { db in
            // The process is gone: no process has the id its hold on the store's sync names.
            try SyncLease.setHolderProcess(try Self.endedProcessID(), db: db)
            return try OutboxTable.countsByState(db)
        }
        let committedBeforeCrash = try await server.records(of: "lee").count
        output.say(
            "The app dies on its third push of 500: the server has committed \(committedBeforeCrash) records; the file holds \(states[1] ?? 0) entries in flight (the batch the server applied, and the next, read while it was on the wire) and \(states[0] ?? 0) pending."
        )

        let second = DemoApp(directory: phone, server: server, sync: Self.batches)
        let reopenedAt = Date()
        try await second.session.signIn("lee")  // its first sync takes the dead app's lease and returns its in-flight entries to pending
        let engine = try await second.engine()
        try await engine.scheduler.initialSync()
        let status = await engine.client.status
        let journal = try await second.journal(since: origin)
        try await second.session.signOut()
        dying.bury()
        try await first.session.signOut()

        output.say("Reopened from its files:")
        DemoTimeline.narrate(journal, since: reopenedAt, to: output)
        let remote = try await server.records(of: "lee")
        let appliedTwice = remote.values.filter { $0.version > 1 }.count
        return ScenarioOutcome(
            metrics: [
                "inFlightAtCrash": states[1] ?? 0, "pushRequests": first.wire.count(Endpoint.push) + second.wire.count(Endpoint.push),
                "pending": status.pending, "serverRecords": remote.count, "appliedTwice": appliedTwice,
            ],
            checks: [
                // In flight: the batch the server applied, and usually the next one, read while it was on the wire.
                (
                    "the crash left \(states[1] ?? 0) entries in flight and \(states[0] ?? 0) pending; the server had applied 1,500 of 2,000",
                    (states[1] ?? 0) >= 500 && (states[0] ?? 0) + (states[1] ?? 0) == 1000 && committedBeforeCrash == 1500
                ),
                (
                    "after recovery and the next sync, \(status.pending) pending and \(remote.count) records on the server",
                    status.pending == 0 && remote.count == 2000
                ),
                ("\(appliedTwice) mutations applied twice (every record at version 1)", appliedTwice == 0),
            ],
            timelines: [.init(title: "lee, before the crash and after", events: journal)]
        )
    }
}
