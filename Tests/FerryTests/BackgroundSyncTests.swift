import Clocks
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

@Suite("Background sync", .timeLimit(.minutes(1)))
struct BackgroundSyncTests {
    static func write(_ count: Int, from start: Int = 0, in session: SyncSession) async throws {
        let store = try #require(await session.store)
        try await store.database.write { db in
            for index in start..<start + count {
                try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index])
            }
        }
    }

    static func inFlight(_ session: SyncSession) async throws -> Int {
        let store = try #require(await session.store)
        return try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1") ?? 0 }
    }

    /// The scheduler's state, through the snapshot an app would read.
    static func schedulerState(_ session: SyncSession) async throws -> SchedulerState? {
        try await session.queueSnapshot()?.scheduler
    }

    /// Alice signed in with `count` changes queued, and a background sync with 25 s whose first
    /// push the server has applied and whose answer never comes.
    static func pushOnTheWire(
        _ count: Int,
        server: TestServer,
        clock: TestClock<Duration>
    ) async throws -> (SyncSession, WithheldAnswerTransport, Task<BackgroundSyncResult, Never>) {
        let withheld = WithheldAnswerTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
        let session = SessionTests.session(server: server, directory: TestDirectory.make("background"), transport: withheld, clock: clock)
        try await session.signIn("alice")
        try await write(count, in: session)
        let background = Task { await session.backgroundSync(timeLimit: .seconds(25)) }
        await withheld.serverApplied()
        return (session, withheld, background)
    }

    @Test("with time to spare, a background sync runs until nothing is left and says no work remains")
    func caughtUp() async throws {
        try await TestServer.run { server in
            let session = SessionTests.session(server: server, directory: TestDirectory.make("background"), clock: TestClock())
            #expect(await session.backgroundSync(timeLimit: .seconds(25)) == BackgroundSyncResult(outcome: .signedOut, runs: 0, remaining: 0))
            try await session.signIn("alice")
            try await Self.write(2_500, in: session)
            let result = await session.backgroundSync(timeLimit: .seconds(25))
            #expect(result.outcome == .caughtUp)
            #expect(result.remaining == 0 && result.runs >= 1)
            #expect(!result.workRemains)
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records.count == 2_500)
            let journal = try #require(await session.client?.journal.events())
            #expect(journal.contains { $0.kind == .trigger && $0.details["trigger"] == "backgroundTask" && $0.details["run"] == "1" })
            #expect(journal.last?.kind == .background && journal.last?.message.hasPrefix("background sync caught up after") == true)
            try await session.signOut()
        }
    }

    @Test(
        "at its time limit the run is stopped cleanly: a push the server applied but never answered goes back to the queue, a waiting caller is told it was interrupted, runs are held until the app is active, then each change is applied once"
    )
    func timeLimit() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, withheld, background) = try await Self.pushOnTheWire(300, server: server, clock: clock)
            #expect(try await Self.inFlight(session) == 300, "the batch is on the wire")
            let waiting = Task { try await session.sync() }  // the app asks meanwhile: it waits for the next run
            while case .running(queued: 0)? = try await Self.schedulerState(session) { await Task.megaYield() }
            await clock.untilSomeoneSleeps()
            await clock.advance(by: .seconds(25) + .milliseconds(1))  // past the limit, never exactly to it
            let result = await background.value

            #expect(result == BackgroundSyncResult(outcome: .timeLimitReached, runs: 0, remaining: 300))
            #expect(result.workRemains)
            #expect(try await Self.inFlight(session) == 0, "nothing is left in flight while the app is suspended")
            await #expect {
                try await waiting.value
            } throws: { error in
                guard (error as? FerryError)?.code == .interrupted else { return false }
                return true
            }
            guard case .held(let triggers)? = try await Self.schedulerState(session) else {
                Issue.record("runs are not held: \(String(describing: try await Self.schedulerState(session)))")
                return
            }
            #expect(triggers >= 1, "the app's trigger is kept for later")

            // A write while held starts nothing, however long it waits.
            try await Self.write(1, from: 300, in: session)
            await clock.advance(by: .seconds(60))
            #expect(withheld.pushes == 1)
            let snapshot = try #require(try await session.queueSnapshot())
            #expect(snapshot.explanation.contains { $0.hasPrefix("Runs are held since a background task's time ran out") }, "\(snapshot.explanation)")

            // Back in the foreground: the held triggers run, the applied push is sent again and applied once.
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            await session.setActive(true)
            #expect(await events.runFinished() != nil)
            #expect(await session.status.pending == 0)
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records.count == 301)
            #expect(records.values.allSatisfy { $0.version == 1 }, "no change was applied twice")
            try await session.signOut()
        }
    }

    @Test("the system's expiration handler cancels the task: the run stops cleanly and the result says work remains")
    func expired() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, _, background) = try await Self.pushOnTheWire(120, server: server, clock: clock)
            background.cancel()
            let result = await background.value
            #expect(result == BackgroundSyncResult(outcome: .expired, runs: 0, remaining: 120))
            #expect(try await Self.inFlight(session) == 0)
            let journal = try #require(await session.client?.journal.events())
            #expect(
                journal.last?.message
                    == "background sync stopped by the system (expired); runs are held until the app is active after 0 runs; 120 changes remain"
            )

            // The user opens the app: a foreground trigger lifts the hold, and the changes go out.
            guard case .held? = try await Self.schedulerState(session) else {
                Issue.record("runs are not held after the task expired")
                return
            }
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            await session.trigger(.becameActive)
            await clock.advance(by: .seconds(3))
            #expect(await events.runFinished() != nil)
            let nextTask = Task { await session.backgroundSync(timeLimit: .seconds(25)) }
            await clock.untilSomeoneSleeps()
            await clock.advance(by: .seconds(3))  // the least time between runs
            let next = await nextTask.value
            #expect(next.outcome == .caughtUp && next.remaining == 0)
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records.count == 120 && records.values.allSatisfy { $0.version == 1 })
            try await session.signOut()
        }
    }

    @Test("offline, a background sync returns at once, saying work remains")
    func offlineAndNoTime() async throws {
        try await TestServer.run { server in
            let (session, link) = SessionTests.scriptedSession(server: server, clock: TestClock())
            link.yield(false)
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            while await scheduler.online != false { await Task.megaYield() }
            try await Self.write(5, in: session)
            let offline = await session.backgroundSync(timeLimit: .seconds(25))
            #expect(offline == BackgroundSyncResult(outcome: .offline, runs: 0, remaining: 5))
            #expect(offline.workRemains)
            try await session.signOut()
        }
    }

    @Test("a sign-out during a background sync ends it as signed out, with nothing to reschedule and nothing left in flight")
    func signOutDuringBackgroundSync() async throws {
        try await TestServer.run { server in
            let (session, _, background) = try await Self.pushOnTheWire(50, server: server, clock: TestClock())
            try await session.signOut()
            let result = await background.value
            #expect(result.outcome == .signedOut)
            #expect(!result.workRemains)
            try await session.signIn("alice")
            #expect(try await Self.inFlight(session) == 0, "the batch went back to the queue")
            #expect(await session.status.pending == 50)
            try await session.signOut()
        }
    }

    @Test("an app opened while its background sync ran is not held: at the time limit the run goes on in front of its user")
    func activeAppIsNotHeld() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, _, background) = try await Self.pushOnTheWire(10, server: server, clock: clock)
            await session.setActive(true)  // the user opened the app
            await clock.untilSomeoneSleeps()
            await clock.advance(by: .seconds(25) + .milliseconds(1))
            let result = await background.value
            #expect(result.outcome == .timeLimitReached)
            let state = try await Self.schedulerState(session)
            guard case .running? = state else {
                Issue.record("the run was stopped or held: \(String(describing: state))")
                return
            }
            try await session.signOut()
        }
    }
}
