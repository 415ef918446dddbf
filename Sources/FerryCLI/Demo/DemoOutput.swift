import Foundation

/// How the demo talks: a narrated timeline and a live progress line on a terminal (with
/// colour), plain lines elsewhere, and nothing but the final JSON object with `--json`.
final class DemoOutput: Sendable {
    let json: Bool
    let terminal: Bool
    private let start = ContinuousClock.now
    private let live: ProgressPrinter

    init(json: Bool) {
        self.json = json
        self.terminal = !json && isatty(STDOUT_FILENO) == 1
        self.live = ProgressPrinter(live: terminal)
    }

    func heading(_ number: Int, _ scenario: any DemoScenario) {
        guard !json else { return }
        printNow("")
        printNow(paint("\(number). \(scenario.title)", .bold) + paint("  [\(scenario.name)]", .dim))
    }

    /// A line of the scenario's story.
    func say(_ line: String) {
        guard !json else { return }
        live.finish()
        printNow("   " + line)
    }

    /// A timeline entry: when (since `origin`), what, and why.
    func timeline(_ at: Date, since origin: Date, _ what: String) {
        let milliseconds = Int((at.timeIntervalSince(origin) * 1000).rounded())
        say(paint(String(format: "%+7d ms", milliseconds), .dim) + "  " + what)
    }

    /// A status line that rewrites itself on a terminal and prints as plain lines elsewhere.
    func progress(_ text: String) {
        guard !json else { return }
        live.show(text)
    }

    func verdict(_ outcome: ScenarioOutcome) {
        guard !json else { return }
        live.finish()
        for (check, held) in outcome.checks {
            printNow("   " + (held ? paint("✔", .green) : paint("✘", .red)) + " " + check)
        }
        printNow("   " + (outcome.passed ? paint("PASS", .green) : paint("FAIL", .red)))
    }

    func failed(_ scenario: any DemoScenario, _ error: any Error) {
        guard !json else { return }
        live.finish()
        printNow("   " + paint("FAIL", .red) + ": \(error)")
    }

    var elapsed: Duration { ContinuousClock.now - start }

    enum Style: String {
        case bold = "1"
        case dim = "2"
        case green = "32"
        case red = "31"
    }

    func paint(_ text: String, _ style: Style) -> String {
        terminal ? "\u{1B}[\(style.rawValue)m\(text)\u{1B}[0m" : text
    }
}
