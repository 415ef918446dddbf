import Ferry
import Foundation

/// Writes ``JournalTimeline``'s page: a headline per track, an SVG time axis per episode with
/// one lane per kind of event, and the events as a table. Every text from the journal is
/// escaped: messages hold what servers answered.
struct TimelinePage {
    private let title: String
    private var body = ""

    init(title: String) { self.title = title }

    // The plot's geometry, in SVG units.
    private static let width = 1_100.0
    private static let plotStart = 110.0
    private static let plotEnd = 1_070.0
    private static let laneHeight = 26.0

    mutating func add(_ track: JournalTimeline.Track) {
        let summary = track.summary
        body += "<section class=\"track\">\n<h2>\(escape(track.title))</h2>\n"
        body += "<p class=\"headline\">\(escape(summary.headline))</p>\n<p class=\"figures\">\(escape(summary.figures))</p>\n"
        if track.events.isEmpty { body += "<p class=\"empty\">The journal is empty: nothing has happened yet.</p>\n" }
        for episode in track.episodes { body += Self.episode(episode) }
        body += Self.table(track.events)
        body += "</section>\n"
    }

    func finish() -> String {
        """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(escape(title))</title>
        <style>\(Self.style)</style>
        </head>
        <body>
        <h1>\(escape(title))</h1>
        \(Self.legend)
        \(body)</body>
        </html>

        """
    }

    // MARK: - One episode's axis

    private static func episode(_ events: ArraySlice<JournalEvent>) -> String {
        guard let first = events.first else { return "" }
        let origin = first.at
        let last = events.map(\.end).max() ?? origin
        let span = max(last.timeIntervalSince(origin), 0.001)
        var plot = Plot(origin: origin, span: span)
        plot.triggers(events)
        plot.network(events, until: last)
        plot.runs(events, until: last)
        plot.requests(events)
        plot.waits(events)
        plot.outcomes(events)
        plot.progress(events)
        let caption = "\(Plot.clock(origin)) · \(Plot.offset(span)) · \(JournalTimeline.Track.Summary.count(events.count, "event"))"
        return """
            <figure class="episode">
            <figcaption>\(escape(caption))</figcaption>
            <svg class="timeline" viewBox="0 0 \(Int(width)) \(Int(plot.height + 24))" width="\(Int(width))" role="img" \
            aria-label="\(escape(caption))">
            \(plot.svg)\(plot.axis())</svg>
            </figure>

            """
    }

    /// Lanes drawn one under the other, each started by `lane(_:rows:)`.
    private struct Plot {
        let origin: Date
        let span: TimeInterval
        var svg = ""
        var height = 4.0
        private var top = 0.0

        init(origin: Date, span: TimeInterval) {
            self.origin = origin
            self.span = span
        }

        func position(_ date: Date) -> Double {
            TimelinePage.plotStart + date.timeIntervalSince(origin) / span * (TimelinePage.plotEnd - TimelinePage.plotStart)
        }

        private mutating func lane(_ name: String, rows: Int = 1) {
            top = height
            let laneHeight = TimelinePage.laneHeight + Double(max(rows, 1) - 1) * 12
            svg += "<g class=\"lane lane-\(name.lowercased())\">"
            svg += rect("lane-band", x: 0, y: top, width: TimelinePage.width, height: laneHeight - 2, title: nil)
            svg += "<text class=\"lane-name\" x=\"8\" y=\"\(format(top + 16))\">\(escape(name))</text></g>\n"
            height += laneHeight
        }

        private func middle(row: Int = 0) -> Double { top + 12 + Double(row) * 12 }

        /// Each trigger where its fate was decided, stacked when they fall together, so that a
        /// storm coalesced into one run reads as a column of markers over one bar.
        mutating func triggers(_ events: ArraySlice<JournalEvent>) {
            let triggers = events.filter { $0.kind == .trigger }
            var rowEnds: [Double] = []
            var placed: [(JournalEvent, Double, Int)] = []
            for event in triggers {
                let x = position(event.at)
                let row =
                    rowEnds.firstIndex { $0 <= x - 11 } ?? (rowEnds.count < 10 ? rowEnds.count : rowEnds.indices.min { rowEnds[$0] < rowEnds[$1] }!)
                if row == rowEnds.count { rowEnds.append(x) } else { rowEnds[row] = x }
                placed.append((event, x, row))
            }
            lane("Triggers", rows: rowEnds.count)
            for (event, x, row) in placed {
                let fate = event[.fate] ?? "unknown"
                svg += "<circle class=\"trigger fate-\(token(fate))\" cx=\"\(format(x))\" cy=\"\(format(middle(row: row)))\" r=\"4.5\">"
                svg += "<title>\(escape("\(offset(event.at)) \(event.message)"))</title></circle>\n"
            }
        }

        /// Offline from a report that the link went down until the link came back.
        mutating func network(_ events: ArraySlice<JournalEvent>, until end: Date) {
            lane("Network")
            var offlineSince: Date?
            for event in events {
                let isConnectivity = event[.trigger] == SyncTrigger.connectivityRestored.rawValue
                if isConnectivity, event.kind == .trigger, event[.online] == "false" {
                    offlineSince = offlineSince ?? event.at
                } else if isConnectivity, event.kind == .triggerReceived, let since = offlineSince {
                    svg += bar("offline", from: since, to: event.at, title: "offline for \(duration(event.at.timeIntervalSince(since)))")
                    offlineSince = nil
                }
            }
            if let since = offlineSince { svg += bar("offline", from: since, to: end, title: "offline since \(offset(since))") }
        }

        /// Each run from its start to its end; one that never ended reaches the axis's end.
        mutating func runs(_ events: ArraySlice<JournalEvent>, until end: Date) {
            lane("Runs")
            var name: String?
            var started: JournalEvent?
            for event in events {
                switch event.kind {
                case .schedulerRun where event[.outcome] == nil:  // a run's start: `run` and `kind`
                    name = "run \(event[.run] ?? "?")" + (event[.kind].map { " (\($0))" } ?? "")
                case .runStarted:
                    if let started { drawRun(started, name: name, end: nil, at: event.at) }
                    started = event
                case .runFinished:
                    guard let start = started else { continue }
                    drawRun(start, name: name, end: event, at: event.at)
                    started = nil
                    name = nil
                default: continue
                }
            }
            if let started { drawRun(started, name: name, end: nil, at: end) }
        }

        private mutating func drawRun(_ start: JournalEvent, name: String?, end: JournalEvent?, at finish: Date) {
            let outcome = end?.runOutcome ?? "unfinished"
            var words = [name ?? "sync"]
            if let end, outcome == "succeeded" {
                words.append("pushed \(end[.pushed] ?? "0"), pulled \(end[.pulled] ?? "0")")
            } else {
                words.append(end?.message ?? "never finished")
            }
            let label = words.joined(separator: ": ")
            svg += bar("run run-\(outcome)", from: start.at, to: finish, title: "\(offset(start.at)) to \(offset(finish)) \(label)")
            svg += text("run-label", label, at: position(start.at) + 3, end: position(start.at) - 3)
        }

        /// Where a label goes: from `x` on, or ending at `end` where it would run off the plot.
        private static func span(of label: String, at x: Double, end: Double) -> ClosedRange<Double> {
            let width = Double(label.count) * 6.2
            return x + width > TimelinePage.width - 4 ? (end - width)...end : x...(x + width)
        }

        /// A label placed as `span(of:at:end:)` says.
        private func text(_ kind: String, _ label: String, at x: Double, end: Double, baseline: Double? = nil) -> String {
            let fitsAfter = Self.span(of: label, at: x, end: end).lowerBound == x
            let anchor = fitsAfter ? "" : " text-anchor=\"end\""
            return
                "<text class=\"\(kind)\" x=\"\(format(fitsAfter ? x : end))\" y=\"\(format(baseline ?? middle() + 4))\"\(anchor)>\(escape(label))</text>\n"
        }

        /// Each request over the time it took, coloured by its answer.
        mutating func requests(_ events: ArraySlice<JournalEvent>) {
            lane("Requests")
            for event in events where event.kind == .request {
                let milliseconds = Double(event.number(.ms))
                let status = event[.status].flatMap(Int.init)
                let kind =
                    switch status {
                    case nil: "request-failed"
                    case (200..<300)?: "request-ok"
                    case 429?: "request-limited"
                    case (400..<500)?: "request-refused"
                    default: "request-error"
                    }
                let bytes = "\(event[.bytes] ?? "0") bytes sent · \(event[.received] ?? "0") received"
                let title = "\(offset(event.at)) \(event.message) · \(bytes) · \(Int(milliseconds)) ms"
                svg += bar(kind, from: event.at.addingTimeInterval(-milliseconds / 1_000), to: event.at, title: title, minimumWidth: 2)
            }
        }

        /// Waits the server asked for (Retry-After, a rate limit) or backoff chose, and waits for another process's lease.
        mutating func waits(_ events: ArraySlice<JournalEvent>) {
            lane("Waits")
            for event in events where event.kind == .wait {
                svg += bar(
                    "wait",
                    from: event.at,
                    to: event.end,
                    title: "\(offset(event.at)) waited \(duration(event.end.timeIntervalSince(event.at))): \(event.message)"
                )
            }
            for event in events where event.kind == .leaseWait {
                svg += marker("lease-wait", at: event.at, title: "\(offset(event.at)) \(event.message)")
            }
        }

        /// Merges, dead letters, split batches, refused tokens and how background syncs ended.
        mutating func outcomes(_ events: ArraySlice<JournalEvent>) {
            lane("Outcomes")
            for event in events {
                switch event.kind {
                case .deadLettered: svg += marker("dead-letter", at: event.at, title: "\(offset(event.at)) dead letter: \(event.message)")
                case .batchHalved: svg += marker("halved", at: event.at, title: "\(offset(event.at)) \(event.message)")
                case .token: svg += marker("token", at: event.at, title: "\(offset(event.at)) \(event.message)")
                case .background, .schedulerHeld: svg += marker("background", at: event.at, title: "\(offset(event.at)) \(event.message)")
                case .runFinished where event.number(.merged) > 0:
                    svg += marker("merged", at: event.at, title: "\(offset(event.at)) merged \(event[.merged] ?? "") conflicting changes")
                default: continue
                }
            }
        }

        /// The words a progress bar showed, labelled where there is room.
        mutating func progress(_ events: ArraySlice<JournalEvent>) {
            lane("Progress", rows: 2)
            let shown = events.filter { $0.kind == .progress }
            for event in shown {
                svg += "<circle class=\"progress\" cx=\"\(format(position(event.at)))\" cy=\"\(format(top + 6))\" r=\"2.5\">"
                svg += "<title>\(escape("\(offset(event.at)) \(event.message)"))</title></circle>\n"
            }
            // Where a bar stopped matters most: the last words of each upload, pull or start-up
            // are labelled first, the latest first, then the others, on two rows, wherever they
            // do not overlap.
            let isLast = shown.indices.map { $0 == shown.count - 1 || Self.stage(of: shown[$0]) != Self.stage(of: shown[$0 + 1]) }
            let order = shown.indices.filter { isLast[$0] }.reversed() + shown.indices.filter { !isLast[$0] }
            var taken: [[ClosedRange<Double>]] = [[], []]
            for index in order {
                let event = shown[index]
                let x = position(event.at)
                let span = Self.span(of: event.message, at: x, end: x)
                let room = (span.lowerBound - 8)...(span.upperBound + 8)
                guard let row = taken.indices.first(where: { row in !taken[row].contains { $0.overlaps(room) } }) else { continue }
                taken[row].append(span)
                svg += text("progress-label", event.message, at: x, end: x, baseline: top + 19 + Double(row) * 12)
            }
        }

        /// An upload's progress has a total, a pull's a count; the app's own (a start-up) neither.
        private static func stage(of event: JournalEvent) -> Int {
            event[.total] != nil ? 0 : event[.done] != nil ? 1 : 2
        }

        /// Ticks at a round step, about eight of them.
        func axis() -> String {
            let steps: [TimeInterval] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1_800, 3_600]
            let step = steps.first { span / $0 <= 8 } ?? span / 8
            var text = "<g class=\"axis\">"
            var tick = 0.0
            while tick <= span + step / 1_000 {
                let x = position(origin.addingTimeInterval(tick))
                text += "<line x1=\"\(format(x))\" y1=\"0\" x2=\"\(format(x))\" y2=\"\(format(height + 4))\"/>"
                text += "<text x=\"\(format(x))\" y=\"\(format(height + 18))\" text-anchor=\"middle\">\(escape(Self.offset(tick)))</text>"
                tick += step
            }
            return text + "</g>\n"
        }

        private func bar(_ kind: String, from start: Date, to end: Date, title: String, minimumWidth: Double = 3) -> String {
            let left = position(start)
            return rect(kind, x: left, y: top + 5, width: max(minimumWidth, position(end) - left), height: 14, title: title)
        }

        private func marker(_ kind: String, at date: Date, title: String) -> String {
            let x = position(date)
            let y = middle()
            let points = [(x, y - 6), (x + 6, y), (x, y + 6), (x - 6, y)].map { "\(format($0.0)),\(format($0.1))" }.joined(separator: " ")
            return "<polygon class=\"\(kind)\" points=\"\(points)\"><title>\(escape(title))</title></polygon>\n"
        }

        private func rect(_ kind: String, x: Double, y: Double, width: Double, height: Double, title: String?) -> String {
            let frame = "x=\"\(format(x))\" y=\"\(format(y))\" width=\"\(format(width))\" height=\"\(format(height))\""
            guard let title else { return "<rect class=\"\(kind)\" \(frame)/>" }
            return "<rect class=\"\(kind)\" \(frame)><title>\(escape(title))</title></rect>\n"
        }

        private func offset(_ date: Date) -> String { Self.offset(date.timeIntervalSince(origin)) }

        private func duration(_ seconds: TimeInterval) -> String { String(Self.offset(seconds).dropFirst()) }

        /// `+0 ms`, `+359 ms`, `+1.5 s`, `+2 min 5 s`.
        static func offset(_ seconds: TimeInterval) -> String {
            guard seconds.isFinite else { return "+?" }
            guard seconds >= 0 else { return "-" + offset(-seconds).dropFirst() }  // a wall clock set back
            return switch seconds {
            case ..<1: "+\(Int((seconds * 1_000).rounded())) ms"
            case ..<60: "+" + String(format: seconds < 10 ? "%.2f s" : "%.1f s", seconds)
            case ..<1e9: "+\(Int(seconds) / 60) min \(Int(seconds) % 60) s"
            default: "+a long time"
            }
        }

        /// The episode's start as people read it, UTC to the millisecond.
        static func clock(_ date: Date) -> String {
            Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
        }
    }

    // MARK: - The events as a table

    private static func table(_ events: [JournalEvent]) -> String {
        guard let origin = events.first?.at else { return "" }
        var rows = ""
        for event in events {
            let details = event.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            rows += "<tr class=\"event kind-\(token(event.kind.rawValue))\"><td>\(escape(Plot.offset(event.at.timeIntervalSince(origin))))</td>"
            rows += "<td>\(escape(event.kind.rawValue))</td><td>\(escape(event.message))</td><td>\(escape(details))</td></tr>\n"
        }
        return """
            <details class="events"><summary>\(escape(JournalTimeline.Track.Summary.count(events.count, "event"))), \
            from \(escape(Plot.clock(origin)))</summary>
            <table><thead><tr><th>when</th><th>kind</th><th>what</th><th>details</th></tr></thead><tbody>
            \(rows)</tbody></table></details>

            """
    }

    // MARK: - Style and legend

    private static let legend = """
        <ul class="legend">
        <li><svg width="12" height="12"><circle class="trigger fate-startedRun" cx="6" cy="6" r="4.5"/></svg>trigger that started a run</li>
        <li><svg width="12" height="12"><circle class="trigger fate-coalescedIntoRun" cx="6" cy="6" r="4.5"/></svg>coalesced into a run</li>
        <li><svg width="12" height="12"><circle class="trigger fate-queuedAfterRun" cx="6" cy="6" r="4.5"/></svg>queued after a run</li>
        <li><svg width="12" height="12"><circle class="trigger fate-waitingForNetwork" cx="6" cy="6" r="4.5"/></svg>waiting for the network</li>
        <li><svg width="12" height="12"><circle class="trigger fate-ignored" cx="6" cy="6" r="4.5"/></svg>ignored (a connectivity report)</li>
        <li><svg width="12" height="12"><rect class="request-ok" width="12" height="12"/></svg>request 2xx</li>
        <li><svg width="12" height="12"><rect class="request-limited" width="12" height="12"/></svg>429 rate limited</li>
        <li><svg width="12" height="12"><rect class="request-refused" width="12" height="12"/></svg>4xx refused</li>
        <li><svg width="12" height="12"><rect class="request-error" width="12" height="12"/></svg>5xx</li>
        <li><svg width="12" height="12"><rect class="request-failed" width="12" height="12"/></svg>no answer</li>
        <li><svg width="12" height="12"><rect class="wait" width="12" height="12"/></svg>wait</li>
        <li><svg width="12" height="12"><rect class="offline" width="12" height="12"/></svg>offline</li>
        <li><svg width="12" height="12"><polygon class="merged" points="6,0 12,6 6,12 0,6"/></svg>merge</li>
        <li><svg width="12" height="12"><polygon class="dead-letter" points="6,0 12,6 6,12 0,6"/></svg>dead letter</li>
        <li><svg width="12" height="12"><polygon class="background" points="6,0 12,6 6,12 0,6"/></svg>background sync ended</li>
        </ul>
        """

    private static let style = """
        body { font: 14px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328; margin: 24px; }
        h1 { font-size: 20px; margin: 0 0 8px; }
        h2 { font-size: 16px; margin: 28px 0 2px; }
        .headline { font-size: 22px; font-weight: 600; margin: 2px 0; }
        .figures, figcaption, .empty { color: #59636e; margin: 2px 0 6px; }
        .legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; color: #59636e; font-size: 12px; }
        .legend svg { vertical-align: -1px; margin-right: 4px; }
        figure { margin: 8px 0 12px; overflow-x: auto; }
        svg.timeline { font-size: 11px; }
        .lane-band { fill: #f6f8fa; }
        .lane-name { fill: #59636e; font-weight: 600; }
        .axis line { stroke: #d1d9e0; stroke-width: 0.5; }
        .axis text { fill: #59636e; }
        .fate-startedRun { fill: #0969da; }
        .fate-coalescedIntoRun { fill: #54aeff; }
        .fate-queuedAfterRun { fill: #8250df; }
        .fate-waitingForNetwork { fill: #ffffff; stroke: #59636e; stroke-width: 1.5; }
        .fate-ignored { fill: #c8d1da; }
        .run-succeeded { fill: #aceebb; stroke: #1a7f37; }
        .run-failed { fill: #ffcecb; stroke: #cf222e; }
        .run-cancelled, .run-unfinished { fill: #eaeef2; stroke: #59636e; stroke-dasharray: 3 2; }
        .run-label, .progress-label { fill: #1f2328; }
        .request-ok { fill: #1a7f37; }
        .request-limited { fill: #bf8700; }
        .request-refused { fill: #fa4549; }
        .request-error { fill: #cf222e; }
        .request-failed { fill: #82071e; }
        .wait { fill: #fff1b3; stroke: #bf8700; }
        .offline { fill: #d1d9e0; }
        .lease-wait { fill: #bf8700; }
        .merged { fill: #8250df; }
        .dead-letter { fill: #cf222e; }
        .halved, .token { fill: #bc4c00; }
        .background { fill: #59636e; }
        .progress { fill: #0969da; }
        details.events summary { cursor: pointer; color: #0969da; }
        table { border-collapse: collapse; font-size: 12px; margin-top: 6px; }
        td, th { text-align: left; padding: 2px 10px 2px 0; vertical-align: top; }
        td:first-child { white-space: nowrap; color: #59636e; font-variant-numeric: tabular-nums; }
        """
}

/// Text made safe inside HTML elements and quoted attributes. Scalar by scalar: a quote with a
/// combining mark after it is one `Character` that is not `"`, and would end an attribute.
private func escape(_ text: String) -> String {
    var escaped = String.UnicodeScalarView()
    for scalar in text.unicodeScalars {
        switch scalar {
        case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
        case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
        case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
        case "\"": escaped.append(contentsOf: "&quot;".unicodeScalars)
        case "'": escaped.append(contentsOf: "&#39;".unicodeScalars)
        case "\u{0}": escaped.append("\u{FFFD}")
        default: escaped.append(scalar)
        }
    }
    return String(escaped)
}

/// A journal value as one CSS class name: letters, digits, `-` and `_` only, so that no value
/// adds a class or leaves the attribute.
private func token(_ text: String) -> String {
    String(
        String.UnicodeScalarView(
            text.unicodeScalars.filter { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_") }
        )
    )
}

/// A coordinate with two decimals, as SVG wants it.
private func format(_ value: Double) -> String { String(format: "%.2f", value.isFinite ? value : 0) }
