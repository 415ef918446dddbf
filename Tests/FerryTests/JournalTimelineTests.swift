import Ferry
import FerryDiagnostics
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// The journal's timeline page: what it counts, how it cuts time, what it refuses to carry.
@Suite("Journal timeline", .timeLimit(.minutes(1)))
struct JournalTimelineTests {
    private static let start = Date(timeIntervalSince1970: 1_800_000_000)

    private static func event(
        _ milliseconds: Double,
        _ kind: JournalEvent.Kind,
        _ message: String = "",
        _ details: [String: String] = [:]
    ) -> JournalEvent {
        JournalEvent(at: start.addingTimeInterval(milliseconds / 1_000), kind: kind, message: message, details: details)
    }

    /// An event of a kind named as the journal stores it, known to this version or not.
    private static func event(_ milliseconds: Double, _ kind: String, _ message: String = "", _ details: [String: String] = [:]) -> JournalEvent {
        event(milliseconds, JournalEvent.Kind(rawValue: kind), message, details)
    }

    private static func trigger(_ milliseconds: Double, _ trigger: String, _ fate: String, why: IgnoredReason? = nil) -> JournalEvent {
        var details = ["trigger": trigger, "fate": fate]
        // As the scheduler journals an ignored report: its reason, in words, and what it said of the link.
        details["reason"] = why?.name
        details["why"] = why?.description
        details["online"] = why?.online.map { "\($0)" }
        return event(milliseconds, "trigger", "\(trigger): \(fate)", details)
    }

    /// The demo's launch storm as the journal records it: ten triggers end in one run.
    private static let storm: [JournalEvent] = [
        trigger(0, "connectivityRestored", "ignored", why: .baseline(online: true)),
        trigger(15, "connectivityRestored", "ignored", why: .wentOffline),
        trigger(16, "launch", "waitingForNetwork"),
        trigger(16, "becameActive", "waitingForNetwork"),
        event(30, "trigger.received", "connectivityRestored received", ["trigger": "connectivityRestored"]),
        trigger(45, "connectivityRestored", "ignored", why: .wentOffline),
        trigger(45, "connectivityRestored", "waitingForNetwork"),
        event(60, "trigger.received", "connectivityRestored received", ["trigger": "connectivityRestored"]),
        trigger(75, "connectivityRestored", "ignored", why: .wentOffline),
        event(90, "trigger.received", "connectivityRestored received", ["trigger": "connectivityRestored"]),
        trigger(340, "launch", "startedRun"),
        trigger(340, "becameActive", "coalescedIntoRun"),
        trigger(340, "connectivityRestored", "coalescedIntoRun"),
        trigger(340, "connectivityRestored", "coalescedIntoRun"),
        trigger(340, "connectivityRestored", "coalescedIntoRun"),
        trigger(340, "launch", "coalescedIntoRun"),
        event(341, "scheduler.run", "run 1 started (full)", ["run": "1", "kind": "full"]),
        event(341, "run.started", "sync started"),
        event(350, "request", "GET /v1/pull?limit=1000 → 200", ["status": "200", "ms": "6", "bytes": "0"]),
        event(351, "progress", "Received 296 changes", ["done": "296"]),
        event(360, "run.finished", "sync finished", ["pushed": "0", "pulled": "296", "merged": "0", "requests": "1"]),
        event(361, "scheduler.run", "run 1 succeeded", ["run": "1", "outcome": "succeeded"]),
    ]

    /// The page's track: what follows the legend, which draws one of each marker.
    private static func page(_ events: [JournalEvent], title: String = "maya") -> String {
        let html = JournalTimeline(title: "timeline", tracks: [.init(title: title, events: events)]).html()
        return String(html[html.range(of: "<section class=\"track\">")!.lowerBound...])
    }

    private static func count(_ needle: String, in text: String) -> Int {
        text.components(separatedBy: needle).count - 1
    }

    @Test("the launch storm reads as ten triggers, one run: each trigger counted once, by the fate that ended it")
    func launchStormHeadline() {
        let html = Self.page(Self.storm)
        #expect(html.contains("<p class=\"headline\">ten triggers, one run</p>"))
        #expect(html.contains("one request · pushed 0 · pulled 296 · no waits · no dead letters"))
        #expect(Self.count("<circle class=\"trigger fate-", in: html) == 13, "every fate is drawn, the three waits for the network too")
        #expect(Self.count("<rect class=\"run run-succeeded\"", in: html) == 1)
        #expect(Self.count("<rect class=\"offline\"", in: html) == 3, "three spells offline, each ended by the link's return")
        #expect(Self.count("<rect class=\"request-ok\"", in: html) == 1)
        #expect(html.contains(">run 1 (full): pushed 0, pulled 296</text>"))
        #expect(html.contains(">Received 296 changes</text>"))
        #expect(Self.count("<tr class=\"event kind-", in: html) == Self.storm.count, "every event is in the table")
    }

    @Test("a quiet minute starts a new axis, unless a wait spans it; a run that never ended is drawn to the axis's end")
    func episodes() {
        let apart = [
            Self.event(0, "run.started", "sync started"),
            Self.event(100, "run.finished", "sync finished", ["pushed": "1", "pulled": "0"]),
            Self.event(120_000, "run.started", "sync started"),
        ]
        var html = Self.page(apart)
        #expect(Self.count("<figure class=\"episode\">", in: html) == 2)
        #expect(Self.count("<rect class=\"run run-unfinished\"", in: html) == 1)
        #expect(html.contains("sync: never finished"))

        let waited = [
            Self.event(0, "run.started", "sync started"),
            Self.event(10, "wait", "rate limited (429)", ["seconds": "90.000"]),
            Self.event(90_100, "request", "POST /v1/push → 200", ["status": "200", "ms": "4", "bytes": "512"]),
            Self.event(90_200, "run.finished", "sync failed: unreachable"),
        ]
        html = Self.page(waited)
        #expect(Self.count("<figure class=\"episode\">", in: html) == 1)
        #expect(Self.count("<rect class=\"wait\"", in: html) == 1)
        #expect(Self.count("<rect class=\"run run-failed\"", in: html) == 1)
        #expect(html.contains("one wait"))
    }

    @Test("the page reads a run's outcome and start from kinds and details, whatever the words say")
    func kindsAndDetailsNotWords() {
        let events = [
            Self.event(0, .schedulerRun, "la course 7 commence", ["run": "7", "kind": "incremental"]),
            Self.event(10, .runStarted, "début"),
            Self.event(100, .runFinished, "terminé", ["outcome": "succeeded", "pushed": "3", "pulled": "4"]),
            Self.event(200, .runStarted, "début"),
            Self.event(300, .runFinished, "sync finished, sort of", ["outcome": "cancelled"]),
        ]
        let html = Self.page(events)
        #expect(Self.count("<rect class=\"run run-succeeded\"", in: html) == 1)
        #expect(Self.count("<rect class=\"run run-cancelled\"", in: html) == 1)
        #expect(html.contains(">run 7 (incremental): pushed 3, pulled 4</text>"))
        #expect(events[2].runOutcome == "succeeded" && events[4].runOutcome == "cancelled" && events[0].runOutcome == nil)
    }

    @Test("what a server or an app wrote is text on the page, never markup; the page loads nothing and runs nothing")
    func hostileText() {
        let hostile = "<script>alert(\"x\")</script><img src=x onerror=alert(1)> & 'quoted'"
        let events = [
            Self.event(0, "run.started", hostile),
            Self.event(5, "deadLettered", "mutation 7 refused: \(hostile)", ["id": "7", "entries": "1", "reason": hostile]),
            Self.event(9, "run.finished", "sync failed: \(hostile)"),
        ]
        let html = JournalTimeline(title: hostile, tracks: [.init(title: hostile, events: events)]).html()
        #expect(!html.contains("<script"), "no script, hostile or ours")
        #expect(!html.contains("<img"))
        #expect(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"))
        #expect(html.contains("&amp; &#39;quoted&#39;"))
        #expect(!html.contains("http://") && !html.contains("https://") && !html.contains("src=\""), "nothing is fetched")
        #expect(html.contains("one dead letter"))
        #expect(Self.count("<polygon class=\"dead-letter\"", in: html) == 2, "the legend's and this one")
    }

    @Test("a quote with a combining mark, spaces in a kind and absurd numbers stay text: no attribute escapes, nothing traps")
    func hostileDetails() {
        let attack = "x\"\u{301} autofocus onfocus=alert(1) x=\""
        let events = [
            Self.trigger(0, "launch", attack),
            Self.event(1, "run.started kind-x onclick=alert(2)", "sync started"),
            Self.event(2, "request", "GET /v1/pull → 200", ["status": "200", "ms": "1e300", "bytes": "nan"]),
            Self.event(3, "request", "GET /v1/pull → 200", ["status": "200", "ms": "nan"]),
            Self.event(4, "wait", "rate limited", ["seconds": "1e300"]),
            Self.event(5, "run.finished", "sync finished", ["pushed": "9223372036854775807", "pulled": "-5", "merged": "x"]),
            Self.event(6, "run.finished", "sync finished", ["pushed": "9223372036854775807"]),
            Self.event(-500, "deadLettered", "before the start", ["entries": "9223372036854775807"]),
        ]
        let html = Self.page(events)
        let markedQuote = "\"\u{301}"
        #expect(!html.contains(markedQuote), "the quote is escaped even with a mark on it")
        #expect(html.contains("class=\"trigger fate-xautofocusonfocusalert1x\""), "a class name keeps letters and digits only")
        #expect(html.contains("class=\"event kind-runstartedkind-xonclickalert2\""))
        #expect(html.contains("x&quot;\u{301} autofocus onfocus=alert(1) x=&quot;"), "as text, escaped")
        #expect(html.contains("pushed 0 · pulled 0"), "counts that cannot be true read 0")
        #expect(html.contains("-500 ms"), "an event stamped before the one before it is shown as it was")
    }

    @Test("an empty journal says so instead of drawing an empty axis")
    func emptyJournal() {
        let html = Self.page([])
        #expect(html.contains("no triggers, no runs"))
        #expect(html.contains("The journal is empty"))
        #expect(!html.contains("<figure"))
    }

    @Test("a sync journals the progress it showed at each tenth, not at every batch, ending at 100%")
    func progressIsJournaled() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            var configuration = SyncConfiguration()
            configuration.batchSize = 100
            configuration.pullPageSize = 100
            let client = ClientFixture.client(store: store, server: server, configuration: configuration)
            // 2,000 changes from another device to pull (the device's own do not come back).
            let token = try await TestServer.token(for: "alice")
            for push in 0..<2 {
                let mutations = (0..<1000).map { (index: Int) -> Mutation in
                    let id = Int64(push * 1000 + index + 1)
                    return .upsert(id: id, entity: "events", entityID: "w-\(id)", data: .value(1))
                }
                _ = try await server.pushOK(PushRequest(clientID: "watch", mutations: mutations), token: token)
            }
            try await store.database.write { db in
                for index in 0..<2_000 {
                    try db.execute(
                        sql: "INSERT INTO events (id, kind, value, hk) VALUES (?, 'steps', ?, ?)",
                        arguments: ["e-\(index)", index, "hk-\(index)"]
                    )
                }
            }
            _ = try await client.sync()
            let progress = try await client.journal.events().filter { $0.kind == .progress }
            let upload = progress.filter { $0.details["total"] != nil }
            #expect(upload.first?.message == "Synced 0 of 2,000 (0%)")
            #expect(upload.last?.message == "Synced 2,000 of 2,000 (100%)")
            #expect(upload.count == 11, "20 batches, 11 lines: \(upload.map(\.message))")
            let pull = progress.filter { $0.details["total"] == nil }.map(\.message)
            #expect(pull.last == "Received 2,000 changes", "\(pull)")
            #expect(pull.count < 10, "20 pages, a line each time the count doubles: \(pull)")
            try await store.close()
        }
    }
}
