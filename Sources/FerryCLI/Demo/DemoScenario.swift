import Ferry
import FerryDiagnostics
import FerryServer
import FerryTesting
import Foundation

/// One of `ferry demo`'s scenarios: a failure from docs/DESIGN.md, played on real components.
protocol DemoScenario: Sendable {
    /// For `--scenario`, like `launch-storm`.
    var name: String { get }
    /// What the scenario shows, in one line.
    var title: String { get }
    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome
}

/// What a scenario measured, and whether Ferry got it right.
struct ScenarioOutcome: Sendable {
    /// Figures in the order they are shown; names as in `ferry demo --json`.
    var metrics: KeyValuePairs<String, Int>
    /// Each check the verdict rests on: what it says, and whether it held.
    var checks: [(String, Bool)]
    /// The journals of the scenario's users, for `ferry demo --report`.
    var timelines: [JournalTimeline.Track] = []

    var passed: Bool { checks.allSatisfy(\.1) }
}

extension DemoScenario {
    /// Runs `body` against a server in this process on a SQLite file in the scenario's
    /// directory, as `ferry serve` would run, and stops it however `body` ends.
    func withServer<T: Sendable>(
        in directory: URL,
        rateLimit: RateLimitPolicy?,
        _ body: (FerryTestServer) async throws -> T
    ) async throws -> T {
        let storage = try SQLiteSyncStorage(path: directory.appendingPathComponent("server.sqlite").path)
        return try await FerryTestServer.run(storage: storage, rateLimit: rateLimit, body)
    }
}
