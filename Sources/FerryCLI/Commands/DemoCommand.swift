import ArgumentParser
import Ferry
import FerryDiagnostics
import FerryProtocol
import Foundation
import Logging

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract:
            "Play the five failures of docs/DESIGN.md, a team sharing spaces and photos from the field on a real server and real client stores, and show Ferry getting each right.",
        discussion: "Runs in a temporary directory with an embedded server on a free loopback port. Exits non-zero if any scenario fails."
    )

    static let scenarios: [any DemoScenario] = [
        LaunchStormScenario(), QueuedEventsScenario(), CrashRecoveryScenario(), AccountSwitchScenario(), HostileNetworkScenario(),
        TeamSpacesScenario(), PhotosFromTheFieldScenario(),
    ]

    @Option(help: "Run only this scenario: \(Self.scenarios.map(\.name).joined(separator: ", ")).")
    var scenario: String?

    @Flag(help: "Print one JSON object with every scenario's figures instead of the narration.")
    var json = false

    @Option(help: "Keep the demo's databases in this directory instead of a temporary one that is removed.")
    var keep: String?

    @Option(help: "Write every scenario's journals as one self-contained HTML timeline page to this file.")
    var report: String?

    func validate() throws {
        if let scenario, !Self.scenarios.contains(where: { $0.name == scenario }) {
            throw ValidationError("unknown scenario '\(scenario)'; choose one of: \(Self.scenarios.map(\.name).joined(separator: ", "))")
        }
        if let report { try validatePagePath(report, option: "--report") }
    }

    func run() async throws {
        let selected = Self.scenarios.filter { scenario == nil || $0.name == scenario }
        let root =
            keep.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("ferry-demo-\(UUID().uuidString.prefix(8))")
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } catch {
            throw CommandFailure("cannot create the demo directory \(root.path): \(error.localizedDescription)")
        }
        defer { if keep == nil { try? FileManager.default.removeItem(at: root) } }

        // The narration tells what happened; only errors go to the log.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .error
            return handler
        }
        let output = DemoOutput(json: json)
        if !json {
            printNow(
                output.paint("Ferry demo", .bold)
                    + ": each scenario runs an embedded `ferry serve` (SQLite, loopback) and app clients built on the Ferry library."
            )
        }
        var results: [(any DemoScenario, ScenarioOutcome?)] = []
        for (index, scenario) in selected.enumerated() {
            output.heading(index + 1, scenario)
            let directory = root.appendingPathComponent(scenario.name)
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                let outcome = try await Self.run(scenario, in: directory, output: output)
                output.verdict(outcome)
                results.append((scenario, outcome))
            } catch {
                output.failed(scenario, error)
                results.append((scenario, nil))
            }
        }

        if let report {
            let tracks = results.flatMap { scenario, outcome in
                (outcome?.timelines ?? []).map { JournalTimeline.Track(title: "\(scenario.name): \($0.title)", events: $0.events) }
            }
            try writePage(JournalTimeline(title: "Ferry demo: the sync timelines", tracks: tracks).html(), to: report)
            if !json { printNow("The timelines are in \(report).") }
        }
        if json {
            printNow(String(decoding: try ProtocolValidation.encode(figures(results)), as: UTF8.self))
        } else {
            printSummary(results, output: output)
        }
        if results.contains(where: { $0.1?.passed != true }) { throw ExitCode(1) }
    }

    /// A scenario that has not finished by then has failed: the demo reports it and goes on.
    static let scenarioTimeLimit: Duration = .seconds(120)

    /// Runs a scenario against its time limit. It runs in a task of its own so that the
    /// demo moves on even if the scenario is stuck where cancellation does not reach.
    private static func run(_ scenario: any DemoScenario, in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        do {
            return try await withTimeLimit(scenarioTimeLimit, clock: ContinuousClock()) { try await scenario.run(in: directory, output: output) }
        } catch is TimeLimitExceeded {
            throw CommandFailure("did not finish within \(scenarioTimeLimit)")
        }
    }

    private func figures(_ results: [(any DemoScenario, ScenarioOutcome?)]) -> JSONObject {
        [
            "scenarios": .array(
                results.map { scenario, outcome in
                    .object([
                        "name": .string(scenario.name),
                        "passed": .bool(outcome?.passed == true),
                        "metrics": .object(
                            Dictionary(uniqueKeysWithValues: (outcome?.metrics.map { ($0.key, JSONValue.integer(Int64($0.value))) } ?? []))
                        ),
                        "checks": .array((outcome?.checks ?? []).map { .object(["check": .string($0.0), "held": .bool($0.1)]) }),
                    ])
                }
            )
        ]
    }

    private func printSummary(_ results: [(any DemoScenario, ScenarioOutcome?)], output: DemoOutput) {
        printNow("")
        let width = results.map(\.0.name.count).max() ?? 10
        for (scenario, outcome) in results {
            let figures = outcome?.metrics.map { "\($0.key) \($0.value)" }.joined(separator: ", ") ?? "did not finish"
            let verdict = outcome?.passed == true ? output.paint("PASS", .green) : output.paint("FAIL", .red)
            printNow(scenario.name.padding(toLength: width + 2, withPad: " ", startingAt: 0) + verdict + "  " + figures)
        }
        let seconds = output.elapsed.seconds
        printNow(String(format: "%d of %d scenarios passed in %.1f s", results.filter { $0.1?.passed == true }.count, results.count, seconds))
    }
}
