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
            var statuses = await session.statusUpdates().makeAsyncIterator()
            #expect(await statuses.next()?.phase == .signedOut)
            #expect(await session.status.phase == .signedOut)
            #expect(await session.store == nil)
            #expect(await session.client == nil)

            try await session.signIn("alice")
            #expect(await session.userID == "alice")
            #expect(await statuses.next()?.phase == .idle)
            try await Self.write(["a-1", "a-2"], in: session)
            while await statuses.next()?.pending != 2 {}

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

    @Test("session.sync() returns when the run that serves it is done; without a user it says why")
    func syncWaitsForItsRun() async throws {
        try await TestServer.run { server in
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: ImmediateClock())
            await #expect(throws: FerryError.stopped("nobody is signed in")) { try await session.sync() }

            try await session.signIn("alice")
            try await Self.write((0..<300).map { "e-\($0)" }, in: session)
            try await session.sync()
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 300)
            #expect(await session.status.pending == 0)
            try await session.signOut()
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
                guard case .stopped = error as? FerryError else { return false }
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
                guard case .stopped = error as? FerryError else { return false }
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

    @Test("the journal reads in time order: eleven triggers, each at its own time, then the run they made")
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
            let journal = try await Journal(store: try ClientFixture.openStore(at: engine.store.path)).events()
            #expect(journal.map(\.at) == journal.map(\.at).sorted(), "events are in time order")
            let triggers = journal.filter { $0.kind == "trigger" }
            #expect(triggers.count == 6)
            #expect(Set(triggers.map(\.at)).count == 6, "each trigger at its own time, not the run's")
            let runStarted = try #require(journal.firstIndex { $0.kind == "scheduler.run" })
            let syncStarted = try #require(journal.firstIndex { $0.kind == "run.started" })
            #expect(journal.lastIndex { $0.kind == "trigger" }! < runStarted)
            #expect(runStarted < syncStarted, "the run starts after the triggers that made it, and before its sync")
        }
    }

    @Test("start-up can be awaited: run() returns when the steps are done, and joins a run in progress")
    func startupCanBeAwaited() async throws {
        let ran = LockIsolated(0)
        let pipeline = StartupPipeline(steps: [
            .blocking("one") { _ in ran.withValue { $0 += 1 } },
            .optional("two") { _ in throw URLError(.timedOut) },
            .optional("three") { _ in ran.withValue { $0 += 1 } },
        ])
        await pipeline.start()
        async let joined = pipeline.run()
        let progress = await pipeline.run()
        #expect(progress.phase == .finished)
        #expect(await joined.phase == .finished)
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
