import Ferry
import Foundation

/// Journals drawn as one self-contained HTML page: per track (a user's store), a time axis
/// with the triggers and their fates, the runs, the requests with their status and size,
/// the waits for rate limits, backoff and the network, merges and dead letters, and the
/// progress the app was shown; under it, every event as a table.
///
/// The page has no script and loads nothing: it can be attached to a support ticket or
/// opened from a device's files. Write it with `ferry client journal --html FILE` or
/// `ferry demo --report FILE`, or from an app's diagnostics screen:
///
/// ```swift
/// let events = try await session.client?.journal.events() ?? []
/// let page = JournalTimeline(title: "Sync timeline", tracks: [.init(title: userID, events: events)]).html()
/// ```
public struct JournalTimeline: Sendable {
    /// One journal on the page: whose it is, and its events in the order they happened.
    public struct Track: Sendable, Equatable {
        /// The track's heading, such as the user or the scenario.
        public var title: String
        /// The events to draw; `Journal.events(limit:)` gives them in order.
        public var events: [JournalEvent]

        /// A track of `events` under `title`.
        public init(title: String, events: [JournalEvent]) {
            self.title = title
            self.events = events
        }
    }

    /// The page's title and first heading.
    public var title: String
    /// The journals on the page, in order.
    public var tracks: [Track]

    /// A page of `tracks` under `title`.
    public init(title: String, tracks: [Track]) {
        self.title = title
        self.tracks = tracks
    }

    /// A quiet spell longer than this starts a new time axis, so that a burst is not squeezed
    /// to a line by the hours around it.
    static let episodeGap: TimeInterval = 60

    /// The page: HTML with its style inline, no script, nothing fetched.
    public func html() -> String {
        var page = TimelinePage(title: title)
        for track in tracks { page.add(track) }
        return page.finish()
    }
}

extension JournalTimeline.Track {
    /// What the track's headline counts: triggers by their final fate and runs, with the work done.
    struct Summary: Equatable {
        var triggers = 0
        var runs = 0
        var requests = 0
        var failedRequests = 0
        var pushed = 0
        var pulled = 0
        var merged = 0
        var deadLetters = 0
        var waits = 0

        /// The headline in words: `ten triggers, one run`.
        var headline: String { "\(Self.count(triggers, "trigger")), \(Self.count(runs, "run"))" }

        /// The figures after the headline: `1 request · pulled 296 · no dead letters`.
        var figures: String {
            var parts = [Self.count(requests, "request")]
            if failedRequests > 0 { parts[0] += " (\(failedRequests.formatted()) not answered 2xx)" }
            parts.append("pushed \(pushed.formatted())")
            parts.append("pulled \(pulled.formatted())")
            if merged > 0 { parts.append("merged \(merged.formatted())") }
            parts.append(Self.count(waits, "wait"))
            parts.append(Self.count(deadLetters, "dead letter"))
            return parts.joined(separator: " · ")
        }

        /// `no runs`, `one run`, `ten triggers`, `1,000 requests`.
        static func count(_ value: Int, _ noun: String) -> String {
            let words = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
            let number = value >= 0 && value < words.count ? words[value] : value.formatted()
            return "\(number) \(noun)\(value == 1 ? "" : "s")"
        }
    }

    /// Counts each trigger once, by the fate that ended it (a trigger waiting for the network
    /// or queued after a run is journaled again when a run takes it, or when it is ignored).
    var summary: Summary {
        var summary = Summary()
        for event in events {
            switch event.kind {
            case .trigger where Self.finalFates.contains(event[.fate] ?? ""): summary.triggers += 1
            case .runStarted: summary.runs += 1
            case .request:
                summary.requests += 1
                if !(event[.status]?.hasPrefix("2") ?? false) { summary.failedRequests += 1 }
            case .runFinished:
                summary.pushed += event.number(.pushed)
                summary.pulled += event.number(.pulled)
                summary.merged += event.number(.merged)
            case .deadLettered: summary.deadLetters += max(1, event.number(.entries))
            case .wait, .leaseWait: summary.waits += 1
            default: break
            }
        }
        return summary
    }

    static let finalFates: Set<String> = ["startedRun", "coalescedIntoRun", "ignored"]

    /// The events cut where nothing happened for `JournalTimeline.episodeGap`; a wait
    /// counts as activity until it ends.
    var episodes: [ArraySlice<JournalEvent>] {
        var episodes: [ArraySlice<JournalEvent>] = []
        var start = events.startIndex
        var busyUntil = Date.distantPast
        for index in events.indices {
            let event = events[index]
            if index > start, event.at.timeIntervalSince(busyUntil) > JournalTimeline.episodeGap {
                episodes.append(events[start..<index])
                start = index
            }
            busyUntil = max(busyUntil, event.end)
        }
        if start < events.endIndex { episodes.append(events[start...]) }
        return episodes
    }
}

extension JournalEvent {
    /// The count a detail holds, as a page can show it: missing, unreadable, negative or
    /// absurd counts read 0.
    func number(_ key: JournalDetail) -> Int {
        guard let value = self[key].flatMap({ Int($0) }), value >= 0, value < 1_000_000_000_000 else { return 0 }
        return value
    }

    /// When the event stopped mattering: a wait's end, or the moment itself.
    var end: Date {
        guard kind == .wait, let seconds = Double(self[.seconds] ?? ""), seconds.isFinite, seconds > 0 else { return at }
        return at.addingTimeInterval(min(seconds, 3_600))
    }
}
