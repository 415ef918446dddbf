import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import FerryTesting
import Foundation
import GRDB
import Testing

@testable import Ferry

/// The session's event stream against a real server: open while active, online and signed
/// in; backoff after failures; each `change` a `serverChange` trigger the scheduler coalesces.
@Suite("Live updates", .timeLimit(.minutes(2)))
struct LiveUpdatesTests {
    /// Waits (real time) until `condition` holds; the server and the network run on real time.
    static func eventually(_ what: String, _ condition: @Sendable () async -> Bool) async throws {
        for _ in 0..<1_000 {
            if await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("never: \(what)")
        throw CancellationError()
    }

    /// Moves the test clock on 100 ms at a time until `condition` holds.
    static func advance(_ clock: TestClock<Duration>, until what: String, _ condition: @Sendable () async -> Bool) async throws {
        for _ in 0..<1_000 {
            if await condition() { return }
            await clock.advance(by: .milliseconds(100))
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("never: \(what)")
        throw CancellationError()
    }

    /// Whether the scheduler is idle after exactly `count` runs.
    static func idle(_ scheduler: SyncScheduler, afterRuns count: Int) async -> Bool {
        guard await scheduler.state == .idle else { return false }
        return await runs(scheduler) == count
    }

    static func runs(_ scheduler: SyncScheduler) async -> Int {
        await scheduler.history.filter { if case .startedRun = $0.1 { true } else { false } }.count
    }

    /// Triggers waiting for the next run (the test clock holds it).
    static func waiting(_ scheduler: SyncScheduler) async -> Int {
        switch await scheduler.state {
        case .settling(let triggers, _), .waitingForMinimumInterval(let triggers, _): triggers
        default: 0
        }
    }

    /// `serverChange` triggers that runs served (not the ignored ones).
    static func serverChanges(_ scheduler: SyncScheduler) async -> Int {
        await scheduler.history.filter { $0.0 == .serverChange }.count
    }

    static func events(in store: FerryStore) async throws -> Set<String> {
        Set(try await store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM events") })
    }

    static func push(_ ids: ClosedRange<Int>, from client: String = "laptop", to server: TestServer) async throws {
        let token = try await TestServer.token(for: "alice")
        for id in ids {
            let mutation = Mutation(id: Int64(id), entity: "events", entityID: "theirs-\(id)", op: .upsert, data: .value(Int64(id)))
            _ = try await server.pushOK(PushRequest(clientID: client, mutations: [mutation]), token: token)
        }
    }

    @Test("a relaunch with nothing new is one pull: the launch run waits for the opening stream's ready (at most liveOpeningWait)")
    func relaunchIsOnePull() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let pulls = LockIsolated(0)
            let asked = LockIsolated(false)
            let (gate, open) = AsyncStream.makeStream(of: Void.self)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                if request.path.hasPrefix("/v1/pull") { pulls.withValue { $0 += 1 } }
                return try await next(request)
            } stream: { request, next in
                asked.setValue(true)
                for await _ in gate { break }
                return try await next(request)
            }
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("relaunch"),
                transport: transport,
                live: true,
                clock: clock
            )
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            try await Self.eventually("the stream is opening") { asked.value }
            await clock.advance(by: .milliseconds(300))
            try await Task.sleep(for: .milliseconds(50))
            #expect(await Self.runs(scheduler) == 0, "past its settle window, the launch run waits for ready")
            open.yield()
            try await Self.eventually("one run, then idle") { await Self.idle(scheduler, afterRuns: 1) }
            await clock.advance(by: .seconds(2))
            try await Task.sleep(for: .milliseconds(50))
            #expect(await Self.runs(scheduler) == 1)
            #expect(pulls.value == 1)
            try await session.signOut()
        }
    }

    @Test("a stream that never says ready holds the launch run for liveOpeningWait at most")
    func launchWaitsForReadyAtMostTheCap() async throws {
        var machine = SchedulerStateMachine(configuration: SchedulerConfiguration())
        _ = machine.trigger(.launch, kind: nil, now: .zero)
        machine.liveStreamOpening(now: .milliseconds(1))
        #expect(machine.timerFired(now: .milliseconds(250)).contains(.armTimer(at: .milliseconds(1001))))
        #expect(machine.timerFired(now: .milliseconds(1001)).contains { if case .startRun = $0 { true } else { false } })
        // Someone waiting for a run does not wait for the stream.
        var manual = SchedulerStateMachine(configuration: SchedulerConfiguration())
        manual.liveStreamOpening(now: .zero)
        #expect(manual.trigger(.manual, kind: nil, now: .zero).contains { if case .startRun = $0 { true } else { false } })
        // A stream that fails lets the waiting run go at once.
        var failing = SchedulerStateMachine(configuration: SchedulerConfiguration())
        _ = failing.trigger(.launch, kind: nil, now: .zero)
        failing.liveStreamOpening(now: .zero)
        #expect(failing.timerFired(now: .milliseconds(300)).contains { if case .startRun = $0 { true } else { false } } == false)
        #expect(failing.liveStreamClosed(now: .milliseconds(400)).contains { if case .startRun = $0 { true } else { false } })
    }

    @Test("the stream is open while active, online and signed in, and closed in the background, offline and after sign-out")
    func followsTheAppsState() async throws {
        try await TestServer.run { server in
            let counting = CountingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let (states, link) = AsyncStream.makeStream(of: Bool.self)
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("live"),
                transport: counting,
                connectivity: ScriptedConnectivity(stream: states),
                live: true,
                clock: TestClock()
            )
            try await session.signIn("alice")
            let live = try #require(await session.engine?.live)
            try await Self.eventually("the stream opened") { await live.opened == 1 }
            await session.setActive(false)
            #expect(await live.isRunning == false)
            await session.setActive(true)
            try await Self.eventually("the stream opened again") { await live.opened == 2 }
            link.yield(true)  // the baseline
            link.yield(false)
            try await Self.eventually("closed offline") { await live.isRunning == false }
            link.yield(true)
            try await Self.eventually("open again online") { await live.opened == 3 }
            try await session.signOut()
            #expect(await live.isRunning == false)
            #expect(counting.count("/v1/events") == 3)
        }
    }

    @Test("a server that is down or refuses the token is retried with growing, jittered waits, never in a loop")
    func backoffAfterFailures() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let attempts = LockIsolated(0)
            let tokensAsked = LockIsolated(0)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                try await next(request)
            } stream: { request, next in
                attempts.withValue { $0 += 1 }
                return try await next(request)
            }
            // A token the server refuses (signed with another secret): each attempt is a 401.
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("live-backoff"),
                transport: transport,
                token: { user in
                    tokensAsked.withValue { $0 += 1 }
                    return try await TestServer.token(for: user, secret: "another-secret-0123456789abcdef0123456789")
                },
                live: true,
                clock: clock
            )
            try await session.signIn("alice")
            try await Self.eventually("the first attempt") { attempts.value == 1 }
            // Nothing happens without the clock: the next attempt waits on it.
            try await Task.sleep(for: .milliseconds(300))
            #expect(attempts.value == 1)
            for _ in 0..<600 {
                await clock.advance(by: .seconds(1))
                try await Task.sleep(for: .milliseconds(1))
            }
            // Waits of up to 0.5, 1, 2, … 60 s (each a random part of it): tens of attempts in ten minutes, not thousands.
            #expect((2...80).contains(attempts.value), "\(attempts.value) attempts in 10 minutes")
            // Each refusal renewed the token for the next attempt, as for any request.
            #expect(tokensAsked.value >= attempts.value)
            try await session.signOut()
        }
    }

    @Test("a stream cut right after ready (a proxy that cuts every stream) is reopened ever more slowly, not in a loop")
    func streamCutAfterReady() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let opened = LockIsolated(0)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                try await next(request)
            } stream: { request, next in
                let stream = try await next(request)
                opened.withValue { $0 += 1 }
                // Its first chunk (`ready`), then the end.
                let (body, chunks) = AsyncThrowingStream.makeStream(of: Data.self)
                let reader = Task {
                    for try await chunk in stream.body {
                        chunks.yield(chunk)
                        break
                    }
                    chunks.finish()
                }
                chunks.onTermination = { _ in reader.cancel() }
                return TransportStream(status: stream.status, headers: stream.headers, body: body)
            }
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("live-cut"),
                transport: transport,
                live: true,
                clock: clock
            )
            try await session.signIn("alice")
            try await Self.eventually("the first stream") { opened.value >= 1 }
            for _ in 0..<600 {
                await clock.advance(by: .seconds(1))
                try await Task.sleep(for: .milliseconds(1))
            }
            #expect((2...80).contains(opened.value), "\(opened.value) streams opened in 10 minutes")
            try await session.signOut()
        }
    }

    @Test("a storm of changes from another device is one run once it settles, and brings all of them")
    func stormIsOneRun() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let session = SessionTests.session(server: server, directory: TestDirectory.make("live-storm"), live: true, clock: clock)
            try await session.signIn("alice")
            let engine = try #require(await session.engine)
            let live = try #require(engine.live)
            try await Self.eventually("the stream opened") { await live.opened == 1 }
            try await Self.advance(clock, until: "the launch run") { await Self.idle(engine.scheduler, afterRuns: 1) }

            try await Self.push(1...50, to: server)
            try await Self.eventually("a change heard") { await Self.waiting(engine.scheduler) >= 1 }
            // The last push's event comes within 100 ms of its commit (the server paces them in real time).
            try await Task.sleep(for: .milliseconds(300))
            let heard = await Self.waiting(engine.scheduler)
            try await Self.advance(clock, until: "the run for the storm") { await Self.idle(engine.scheduler, afterRuns: 2) }
            let events = try await Self.events(in: engine.store)
            let runs = await Self.runs(engine.scheduler)
            #expect(events.count == 50)
            #expect(runs == 2, "\(heard) events")
            try await session.signOut()
        }
    }

    @Test("the device's own push wakes no pull; another device's push right after it is pulled")
    func ownPushCostsNoPull() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let counting = CountingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("live-own"),
                transport: counting,
                live: true,
                clock: clock
            )
            try await session.signIn("alice")
            let engine = try #require(await session.engine)
            try await Self.eventually("the stream opened") { await engine.live?.opened == 1 }
            try await Self.advance(clock, until: "the launch run") { await Self.idle(engine.scheduler, afterRuns: 1) }

            try await SessionTests.write("mine", in: session)
            try await Self.advance(clock, until: "the run that pushes it") { await Self.idle(engine.scheduler, afterRuns: 2) }
            // Another device writes at once: its event comes after any the own push caused
            // (one stream, in order, one event per 50 ms), so waiting for it waits for both.
            try await Self.push(1...1, to: server)
            try await Self.eventually("the other device's change heard") { await Self.waiting(engine.scheduler) >= 1 }
            try await Task.sleep(for: .milliseconds(200))
            #expect(await Self.waiting(engine.scheduler) == 1)
            try await Self.advance(clock, until: "its run") { await Self.idle(engine.scheduler, afterRuns: 3) }
            #expect(await Self.serverChanges(engine.scheduler) == 1)
            let events = try await Self.events(in: engine.store)
            #expect(events == ["mine", "theirs-1"])
            #expect(counting.count("/v1/pull") == 3, "launch, the push's run, the other device's change")
            try await session.signOut()
        }
    }

    @Test("a change made while the stream was down is pulled when it opens again, with no other trigger")
    func changeMissedWhileDown() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let down = LockIsolated(true)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                try await next(request)
            } stream: { request, next in
                if down.value { throw URLError(.cannotConnectToHost) }
                return try await next(request)
            }
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("live-down"),
                transport: transport,
                live: true,
                clock: clock
            )
            try await session.signIn("alice")
            let engine = try #require(await session.engine)
            try await Self.advance(clock, until: "the launch run") { await Self.idle(engine.scheduler, afterRuns: 1) }
            try await Self.push(1...1, to: server)
            down.setValue(false)
            try await Self.advance(clock, until: "the stream opened and its run pulled") {
                (try? await Self.events(in: engine.store)) == ["theirs-1"]
            }
            #expect(await engine.live?.opened == 1)
            #expect(await engine.scheduler.history.contains { $0.0 == .serverChange && $0.1 == .startedRun(2) })
            try await session.signOut()
        }
    }
}
