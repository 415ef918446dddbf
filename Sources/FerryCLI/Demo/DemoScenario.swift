import Foundation

/// One of `ferry demo`'s scenarios: a failure from DESIGN.md, played on real components.
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

    var passed: Bool { checks.allSatisfy(\.1) }
}
