import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Logging
import Testing

@testable import Ferry

/// A session an app holds for its whole life: what it hands out follows the signed-in user,
/// its calls return when their work is done, and nothing stale is handed out silently.
@Suite("Session lifetime", .timeLimit(.minutes(2)))
struct SessionLifetimeTests {
    static func write(_ ids: [String], in session: SyncSession) async throws {
        let store = try #require(await session.store)
        try await store.database.write { db in
            for id in ids { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: [id]) }
        }
    }

    @Test("one status stream follows sign-in, sign-out and a switch, and does not end with them")
    func statusFollowsTheSession() async throws {
        try await TestServer.run { server in
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: TestClock())
            var statuses = session.statusUpdates().makeAsyncIterator()
            #expect(await statuses.next()?.phase == .signedOut)
            #expect(await session.status.phase == .signedOut)
            #expect(await session.store == nil)
            #expect(await session.client == nil)

            try await session.signIn("alice")
            #expect(await session.userID == "alice")
            #expect(await statuses.next()?.phase == .idle)
            try await Self.write(["a-1", "a-2"], in: session)
            while let status = await statuses.next(), status.pending != 2 {}

            try await session.signIn("bob")
            #expect(await statuses.next()?.phase == .signedOut)
            let bob = try #require(await statuses.next())
            #expect(bob.phase == .idle && bob.pending == 0, "Bob's status, not Alice's: \(bob)")
            try await session.signOut()
            #expect(await statuses.next()?.phase == .signedOut)
            try await session.signIn("alice")
            #expect(await statuses.next()?.pending == 2, "Alice's kept changes are hers again")
            try await session.signOut()
        }
    }

    @Test("session.sync() returns when the run that serves it is done, not before; without a user it says why")
    func syncWaitsForItsRun() async throws {
        try await TestServer.run { server in
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("session"),
                transport: gated,
                clock: ImmediateClock()
            )
            await #expect {
                try await session.sync()
            } throws: { error in
                (error as? FerryError).map { $0.code == .stopped && $0.message == "nobody is signed in" } == true
            }

            try await session.signIn("alice")
            try await Self.write((0..<300).map { "e-\($0)" }, in: session)
            while gated.pushes == 0 { await Task.megaYield() }  // a run took the 300; its push is held
            let returned = LockIsolated(false)
            let sync = Task {
                try await session.sync()  // served by the run after the one in progress
                returned.setValue(true)
            }
            await Task.megaYield()
            try await Self.write((0..<50).map { "later-\($0)" }, in: session)  // not in the held batch
            #expect(!returned.value, "sync() must wait while a push is held")
            gated.opener.finish()
            try await sync.value
            #expect(returned.value)
            #expect(
                try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 350,
                "returned after the run that serves it, not the one that was running"
            )
            #expect(await session.status.pending == 0)
            try await session.signOut()
        }
    }

    @Test("offline, session.sync() and the start-up's initial sync fail at once instead of waiting; the trigger runs when the link returns")
    func offlineFailsFast() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, link) = SessionTests.scriptedSession(server: server, clock: clock)
            link.yield(false)  // the monitor's first report: offline
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            while await scheduler.online != false { await Task.megaYield() }
            try await Self.write(["e-1"], in: session)
            await #expect {
                try await session.sync()
            } throws: { error in
                guard let error = error as? FerryError, error.code == .unreachable else { return false }
                let why = error.message
                return why.contains("offline")
            }
            let progress = await StartupPipeline(steps: [.signedIn(session), .initialSync(session)]).run()
            #expect(progress.phase == .finished)
            #expect(progress.outcomes.last?.1 == .skipped("\(FerryError.unreachable("offline; the sync runs when the network returns"))"))

            var events = EventReader(await scheduler.eventStream())
            link.yield(true)  // back online: what waited runs
            while await scheduler.online != true { await Task.megaYield() }
            await clock.advance(by: .seconds(3))
            #expect(await events.runFinished() != nil)
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).keys.contains("events/e-1"))
            try await session.signOut()
        }
    }

    @Test("sign-out stops a run the app started itself: it returns promptly, nothing stays in flight, the stale client reads signed out")
    func signOutStopsTheAppsOwnRun() async throws {
        try await TestServer.run { server in
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let directory = TestDirectory.make("session")
            let session = SessionTests.session(server: server, directory: directory, transport: gated, clock: TestClock())
            try await session.signIn("alice")
            try await Self.write((0..<50).map { "e-\($0)" }, in: session)
            let client = try #require(await session.client)
            let run = Task { try await client.sync() }  // the app's own call, not the scheduler's
            while gated.pushes == 0 { await Task.megaYield() }

            try await session.signOut()  // must not wait for the held push
            await #expect {
                try await run.value
            } throws: { error in
                // The client's own stop, not the scheduler's or the session's.
                (error as? FerryError).map {
                    $0.code == .stopped
                        && $0.message == "this client's user signed out and its store is closed; `SyncSession.client` is the signed-in user's"
                } == true
            }
            #expect(await client.status.phase == .signedOut)
            let file = try DatabaseQueue(path: directory.appendingPathComponent(StoreLocation.fileName(forUser: "alice")).path)
            let inFlight = try await file.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1") ?? -1 }
            #expect(inFlight == 0)
            try await session.signIn("alice")  // the lease was given up: the next sign-in syncs at once
            gated.opener.finish()
            try await session.sync()
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 50)
            try await session.signOut()
        }
    }

    @Test(
        "the app's own client.sync() is a run of the user's scheduler, its only record: the scheduler shows it running and records its trigger, a later session.sync() waits behind it, and a background task's end stops it cleanly"
    )
    func appsOwnRunIsTheSchedulers() async throws {
        try await TestServer.run { server in
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), transport: gated, clock: TestClock())
            try await session.signIn("alice")
            try await Self.write((0..<50).map { "e-\($0)" }, in: session)
            let client = try #require(await session.client)
            let scheduler = try #require(await session.engine?.scheduler)
            let own = Task { _ = try await client.sync() }  // starts at once: the launch run still settles on the test clock
            while gated.pushes == 0 { await Task.megaYield() }
            guard case .running = await scheduler.state else {
                Issue.record("the scheduler does not know of the app's run: \(await scheduler.state)")
                return
            }
            #expect(await scheduler.history.contains { $0 == (.manual, .startedRun(1)) || $0 == (.manual, .coalescedIntoRun(1)) })
            let joined = Task { _ = try await client.sync() }  // joins the run in progress: no second push
            let waiting = Task { try await session.sync() }  // waits for the run after it
            while await scheduler.waitingCallers < 3 { await Task.megaYield() }
            #expect(await scheduler.history.filter { $0.0 == .manual }.count == 2, "the joined call asked for no run")

            await scheduler.hold(unlessActivatedAfter: await scheduler.activations)  // the background task's time ran out
            for run in [own, joined, waiting] {
                await #expect {
                    try await run.value
                } throws: { error in
                    (error as? FerryError)?.code == .interrupted
                }
            }
            let inFlight = try await client.store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1")
            }
            #expect(inFlight == 0, "the batch on the wire is back in the queue")
            #expect(gated.pushes == 1)

            gated.opener.finish()
            try await session.sync()  // a person waits: the hold lifts
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 50)
            try await session.signOut()
        }
    }

    @Test("in a session, cancelling the app's own sync() that shares the launch run stops only its wait: the run goes on for the launch")
    func cancellingASharedRun() async throws {
        try await TestServer.run { server in
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), transport: gated, clock: TestClock())
            try await session.signIn("alice")
            try await Self.write((0..<20).map { "e-\($0)" }, in: session)
            let client = try #require(await session.client)
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            let own = Task { _ = try await client.sync() }  // the launch (and the write) still settle: it joins their request
            while gated.pushes == 0 { await Task.megaYield() }
            own.cancel()
            await #expect(throws: CancellationError.self) { try await own.value }
            guard case .running = await scheduler.state else {
                Issue.record("the shared run was cancelled with the app's call: \(await scheduler.state)")
                return
            }
            gated.opener.finish()
            #expect(await events.runFinished() != nil)
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 20, "the launch's run went on")
            try await session.signOut()
        }
    }

    @Test(
        "without a session, cancelling the call that started a run cancels the run and returns once its batch is back in the queue; cancelling a call that joined it stops only that call's wait"
    )
    func cancellingTheOwnRun() async throws {
        try await TestServer.run { server in
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server, transport: gated)
            try await store.database.write { db in
                for index in 0..<20 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: ["e-\(index)"]) }
            }
            let own = Task { _ = try await client.sync() }
            while gated.pushes == 0 { await Task.megaYield() }
            let scheduler = await client.scheduler
            let joined = Task { _ = try await client.sync() }
            while await scheduler.waitingCallers < 2 { await Task.megaYield() }

            joined.cancel()
            await #expect(throws: CancellationError.self) { try await joined.value }
            #expect(await scheduler.state == .running(queued: 0), "the joiner's cancellation left the run alone")
            own.cancel()
            await #expect(throws: CancellationError.self) { try await own.value }
            let inFlight = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1") }
            #expect(inFlight == 0, "back in the queue when the cancelled call returns")
            #expect(await scheduler.state == .idle)

            gated.opener.finish()
            #expect(try await client.sync().upload.acknowledged == 20)
        }
    }

    @Test("a token provider that never answers does not hold up sign-out")
    func hungTokenProvider() async throws {
        let asked = LockIsolated(false)
        try await TestServer.run { server in
            let session = SessionTests.session(
                server: server,
                directory: TestDirectory.make("session"),
                token: { _ in
                    asked.setValue(true)
                    // A login screen nobody answers, and that ignores cancellation.
                    while true { try? await Task.sleep(for: .seconds(3600)) }
                },
                clock: ImmediateClock()
            )
            try await session.signIn("alice")
            try await Self.write(["e-1"], in: session)
            let client = try #require(await session.client)
            let run = Task { try await client.sync() }
            while !asked.value { await Task.megaYield() }  // the run is waiting for its token
            try await session.signOut()
            await #expect(throws: (any Error).self) { try await run.value }
        }
    }

    @Test("an engine kept across a sign-out fails loudly: sync throws, its status stream ends, its store is closed")
    func staleEngineFailsLoudly() async throws {
        try await TestServer.run { server in
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: TestClock())
            try await session.signIn("alice")
            let stale = try await session.signedInEngine()
            try await session.signOut()

            await #expect {
                try await stale.client.sync()
            } throws: { error in
                guard (error as? FerryError)?.code == .stopped else { return false }
                return true
            }
            var updates = await stale.client.statusUpdates().makeAsyncIterator()
            _ = await updates.next()
            #expect(await updates.next() == nil, "a stopped client's stream ends instead of waiting forever")
            await #expect(throws: (any Error).self) {
                try await stale.store.database.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
            }
            await #expect {
                try await stale.scheduler.run(for: .manual)
            } throws: { error in
                guard (error as? FerryError)?.code == .stopped else { return false }
                return true
            }
        }
    }

    @Test("after a write returns, the next status read counts it: one at a time, and 2,000 in one transaction")
    func statusCountsEveryCommittedWrite() async throws {
        try await TestServer.run { server in
            // A test clock that nobody advances: no run starts, so only the writes move the count.
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: TestClock())
            try await session.signIn("alice")
            for index in 0..<200 {
                try await Self.write(["one-\(index)"], in: session)
                let status = await session.status
                #expect(status.pending == index + 1, "\(status)")
            }
            try await Self.write((0..<2000).map { "many-\($0)" }, in: session)
            #expect(await session.status.pending == 2200)
            let client = try #require(await session.client)
            #expect(await client.status.pending == 2200)
            try await session.signOut()
        }
    }

    @Test("a client without a session counts writes exactly too")
    func clientStatusIsExact() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            #expect(await client.status.pending == 0)
            try await store.database.write { db in
                for index in 0..<2000 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: ["e-\(index)"]) }
            }
            #expect(await client.status.pending == 2000)
            try await client.sync()
            #expect(await client.status.pending == 0)
        }
    }

    @Test("the journal reads in time order: six triggers, each received at its own time, then their fates and the run they made")
    func journalInTimeOrder() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: clock)
            try await session.signIn("alice")  // raises launch
            let engine = try await session.signedInEngine()
            var events = EventReader(await engine.scheduler.eventStream())
            for trigger in [SyncTrigger.becameActive, .localChange, .remoteNotification, .becameActive, .localChange] {
                try await Task.sleep(for: .milliseconds(15))  // real time apart, as a launch storm spreads
                await session.trigger(trigger)
            }
            await clock.advance(by: .milliseconds(251))
            #expect(await events.runFinished() == 1)
            try await session.signOut()

            // Read after the sign-out, which waits for the scheduler's journal writer to finish.
            // The scheduler's events reach the file through a writer task of their own, so they
            // may be written after the run's: the journal reads them in the order they happened.
            let store = try ClientFixture.openStore(at: engine.store.path)
            let journal = try await Journal(store: store).events()
            let received = journal.filter { $0.kind == .triggerReceived }
            #expect(received.count == 6)
            #expect(Set(received.map(\.at)).count == 6, "each trigger at the time it arrived, not the run's")
            let fates = journal.indices.filter { journal[$0].kind == .trigger && journal[$0].details["fate"] != "ignored" }
            let runStarted = try #require(journal.firstIndex { $0.kind == .schedulerRun })
            let syncStarted = try #require(journal.firstIndex { $0.kind == .runStarted })
            let lastReceived = try #require(journal.lastIndex { $0.kind == .triggerReceived })
            #expect(fates.count == 6)
            #expect(lastReceived < fates.min()!, "a fate comes after its trigger")
            #expect(fates.max()! < runStarted && runStarted < syncStarted, "the run starts after the fates that made it, and before its sync")
        }
    }

    @Test("start-up can be awaited: run() returns when the steps are done, and a second run() joins the first")
    func startupCanBeAwaited() async throws {
        let ran = LockIsolated(0)
        let (gate, opener) = AsyncStream.makeStream(of: Void.self)
        let pipeline = StartupPipeline(steps: [
            .blocking("one") { _ in
                ran.withValue { $0 += 1 }
                for await _ in gate {}  // held until the test opens it
            },
            .optional("two") { _ in throw URLError(.timedOut) },
            .optional("three") { _ in ran.withValue { $0 += 1 } },
        ])
        let first = Task { await pipeline.run() }
        while ran.value == 0 { await Task.megaYield() }
        let secondReturned = LockIsolated(false)
        let second = Task {
            let progress = await pipeline.run()
            secondReturned.setValue(true)
            return progress
        }
        await Task.megaYield()
        #expect(await pipeline.current.phase == .running(step: "one"))
        #expect(!secondReturned.value, "the second run() waits for the first")
        opener.finish()
        let progress = await first.value
        #expect(progress.phase == .finished)
        #expect(await second.value.phase == .finished)
        #expect(ran.value == 2, "the steps ran once")
        #expect(progress.outcomes.map(\.1) == [.completed, .skipped("\(URLError(.timedOut))"), .completed])
    }

    @Test("routine events log nothing at info or above: sign-in, sign-out, a skipped start-up step")
    func quietByDefault() async throws {
        let log = CapturedLog.processWide
        let tag = UUID().uuidString
        try await TestServer.run { server in
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: ImmediateClock())
            let pipeline = StartupPipeline(steps: [
                .signedIn(session),
                .optional("Location permission \(tag)") { _ in throw URLError(.timedOut) },
                .initialSync(session),
            ])
            try await session.signIn("quiet-\(tag)")
            #expect(await pipeline.run().phase == .finished)
            try await Self.write(["e-1"], in: session)
            try await session.signOut()
        }
        #expect(log.text.filter { $0.contains(tag) }.isEmpty, "\(log.text)")
    }
}
