import Ferry
import Foundation

/// Tells a scenario's story from the user's journal: what happened, when, and why.
enum DemoTimeline {
    /// Prints the journal's scheduler and run entries since `origin`, with requests folded
    /// into counts so that a 20-request run stays one line.
    static func narrate(_ events: [JournalEvent], since origin: Date, to output: DemoOutput, limit: Int = 24) {
        var lines: [(Date, String)] = []
        var requests: (first: Date, count: Int, outcomes: [String: Int])?
        func flushRequests() {
            guard let pending = requests else { return }
            let outcomes = pending.outcomes.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", ")
            lines.append((pending.first, "\(pending.count) request\(pending.count == 1 ? "" : "s"): \(outcomes)"))
            requests = nil
        }
        for event in events where event.at >= origin {
            switch event.kind {
            case .request:
                let outcome = "\(event[.path] ?? "") \(event[.status] ?? "failed")"
                if requests == nil { requests = (event.at, 0, [:]) }
                requests?.count += 1
                requests?.outcomes[outcome, default: 0] += 1
            case .trigger, .schedulerRun, .runFinished, .wait, .deadLettered, .batchHalved, .spaceRevoked, .spaceJoined:
                flushRequests()
                lines.append((event.at, event.message + detailText(event)))
            default:
                continue
            }
        }
        flushRequests()
        for (at, text) in lines.prefix(limit) { output.timeline(at, since: origin, text) }
        if lines.count > limit { output.say("… \(lines.count - limit) more entries in the journal") }
    }

    private static func detailText(_ event: JournalEvent) -> String {
        guard event.kind == .runFinished, let pushed = event[.pushed], let pulled = event[.pulled] else { return "" }
        return ": pushed \(pushed), pulled \(pulled), \(event[.requests] ?? "?") requests"
    }
}
