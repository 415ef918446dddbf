import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

@Suite("Session", .timeLimit(.minutes(1)))
struct SessionTests {
    static func session<C: Clock>(
        server: TestServer,
        directory: URL,
        policy: SignOutPolicy = .keepPendingChanges,
        transport: (any SyncTransport)? = nil,
        token: SyncSession.UserTokenProvider? = nil,
        connectivity: (any ConnectivityMonitor)? = nil,
        live: Bool = false,
        clock: C
    ) -> SyncSession where C.Duration == Duration {
        var configuration = SessionConfiguration(
            storeDirectory: directory,
            tables: [ClientFixture.events, ClientFixture.notes],
            schema: ClientFixture.schema()
        )
        configuration.signOutPolicy = policy
        // The event stream only where a test is about it: its `ready` arrives in real time, and
        // may ask for a run after a test clock's advance started the launch run, one more than
        // a test counting runs and triggers expects (LiveUpdatesTests has that race's rule).
        configuration.liveUpdates = live
        return SyncSession(
            configuration: configuration,
            transport: transport ?? URLSessionTransport(baseURL: URL(string: server.baseURL)!),
            token: token ?? { user in try await TestServer.token(for: user) },
            connectivity: connectivity,
            clock: clock
        )
    }

    /// A session whose connectivity monitor reports what the test yields to `link`.
    static func scriptedSession<C: Clock>(
        server: TestServer,
        clock: C
    ) -> (session: SyncSession, link: AsyncStream<Bool>.Continuation) where C.Duration == Duration {
        let (states, link) = AsyncStream.makeStream(of: Bool.self)
        let session = session(
            server: server,
            directory: TestDirectory.make("session"),
            connectivity: ScriptedConnectivity(stream: states),
            clock: clock
        )
        return (session, link)
    }

    static func write(_ id: String, in session: SyncSession) async throws {
        let store = try #require(await session.engine?.store)
        try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: [id]) }
    }

    @Test("an app that follows its auth state awaits each sign-in, switch and sign-out it fed, and hears of one that failed")
    func awaitFollowedUsers() async throws {
        try await TestServer.run { server in
            let directory = TestDirectory.make("follow")
            let session = Self.session(server: server, directory: directory, clock: TestClock())
            let (users, auth) = AsyncStream.makeStream(of: String?.self)
            let following = Task { try await session.follow(users) }

            auth.yield("alice")
            #expect(try await session.whenFollowed("alice")?.userID == "alice")
            #expect(await session.engine?.userID == "alice")
            auth.yield("bob")
            #expect(try await session.whenFollowed("bob")?.userID == "bob")
            auth.yield(nil)
            #expect(try await session.whenFollowed(nil) == nil)
            #expect(await session.engine == nil)

            // Carol's store cannot be opened (a directory stands where its file goes).
            try FileManager.default.createDirectory(at: try StoreLocation.path(forUser: "carol", in: directory), withIntermediateDirectories: true)
            auth.yield("carol")
            await #expect(throws: (any Error).self) { try await session.whenFollowed("carol") }
            auth.yield("alice")
            #expect(try await session.whenFollowed("alice")?.userID == "alice", "the next value is still followed")
            auth.finish()
            try await following.value
            await #expect(throws: CancellationError.self, "follow has ended: nothing more will be followed") {
                try await session.whenFollowed("bob")
            }
            try await session.signOut()
        }
    }

    @Test("nothing runs before sign-in; sign-in starts processing, and local writes trigger runs by themselves")
    func signInStartsProcessing() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let session = Self.session(server: server, directory: TestDirectory.make("session"), clock: clock)
            await session.trigger(.launch)  // the app launched before anyone signed in: nothing to do
            #expect(await session.engine == nil)

            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            await clock.advance(by: .milliseconds(251))
            #expect(await events.runFinished() == 1)

            try await Self.write("e-1", in: session)
            await clock.untilSomeoneSleeps()  // the write's trigger reaches the scheduler on a task of its own
            await clock.advance(by: .milliseconds(2001))
            #expect(await events.runFinished() == 2)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.keys.contains("events/e-1"))
            try await session.signOut()
        }
    }

    @Test("a widget writes into the app's store from another process: the app counts the changes in its status and syncs them")
    func otherProcessWrites() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let directory = TestDirectory.make("session")
            var configuration = SessionConfiguration(
                storeDirectory: directory,
                tables: [ClientFixture.events, ClientFixture.notes],
                schema: ClientFixture.schema()
            )
            configuration.otherProcessCheckInterval = .milliseconds(50)
            let session = SyncSession(
                configuration: configuration,
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: { user in try await TestServer.token(for: user) },
                clock: clock
            )
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            await clock.advance(by: .milliseconds(251))
            #expect(await events.runFinished() == 1)

            // The widget: its own store handle (its own connections, as in another process) on the same file.
            let widget = try ClientFixture.openStore(at: directory.appendingPathComponent(StoreLocation.fileName(forUser: "alice")).path)
            try await widget.database.write { db in
                for index in 0..<20 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["w-\(index)", index]) }
            }
            for await status in session.statusUpdates() where status.pending == 20 { break }
            await clock.untilSomeoneSleeps()  // the trigger waits for its settle window
            await clock.advance(by: .milliseconds(2001))
            #expect(await events.runFinished() == 2)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.keys.filter { $0.hasPrefix("events/w-") }.count == 20)
            #expect(await session.status.pending == 0)
            try await widget.close()
            try await session.signOut()
        }
    }

    @Test("sign-out mid-upload stops cleanly: nothing left in flight, everything still queued")
    func signOutMidUpload() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let directory = TestDirectory.make("session")
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let session = Self.session(server: server, directory: directory, transport: gated, clock: clock)
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            for index in 0..<20 { try await Self.write("e-\(index)", in: session) }
            await clock.advance(by: .milliseconds(251))
            _ = await events.runStarted()
            while gated.pushes == 0 { await Task.megaYield() }  // the push is on the wire

            try await session.signOut()
            let file = try DatabaseQueue(path: directory.appendingPathComponent(StoreLocation.fileName(forUser: "alice")).path)
            let states = try await file.read { db in
                try [Int: Int](
                    uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n FROM ferry_outbox WHERE state IN (0, 1) GROUP BY state")
                        .map { ($0["state"], $0["n"]) }
                )
            }
            #expect(states == [0: 20], "all pending, none in flight: \(states)")
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).isEmpty)
        }
    }

    @Test("switching users: B never sends A's entries; A's are sent when A returns, or gone under erase")
    func switchingUsers() async throws {
        for policy in [SignOutPolicy.keepPendingChanges, .eraseLocalData] {
            try await TestServer.run { server in
                let clock = TestClock()
                let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
                let session = Self.session(server: server, directory: TestDirectory.make("session"), policy: policy, transport: gated, clock: clock)
                try await session.signIn("alice")
                for index in 0..<5 { try await Self.write("alice-\(index)", in: session) }
                try await session.signIn("bob")  // a switch: Alice's work stops before Bob's starts
                gated.opener.yield(())
                gated.opener.finish()
                try await Self.write("bob-1", in: session)
                var events = EventReader(await session.engine!.scheduler.eventStream())
                await clock.advance(by: .milliseconds(251))
                #expect(await events.runFinished() == 1)

                let aliceToken = try await TestServer.token(for: "alice")
                let bobToken = try await TestServer.token(for: "bob")
                #expect(Set(try await server.pullAll(token: bobToken).keys) == ["events/bob-1"])
                #expect(try await server.pullAll(token: aliceToken).isEmpty)

                try await session.signIn("alice")
                events = EventReader(await session.engine!.scheduler.eventStream())
                await clock.advance(by: .milliseconds(251))
                #expect(await events.runFinished() == 1)
                let alice = try await server.pullAll(token: aliceToken)
                #expect(alice.count == (policy == .keepPendingChanges ? 5 : 0), "\(policy)")
                #expect(Set(try await server.pullAll(token: bobToken).keys) == ["events/bob-1"])
                try await session.signOut()
            }
        }
    }

    @Test("user ids that differ only in Unicode normalization are two users: a switch between them is a switch")
    func normalizationIsASwitch() async throws {
        try await TestServer.run { server in
            let composed = "zo\u{EB}"
            let decomposed = "zoe\u{308}"
            let session = Self.session(server: server, directory: TestDirectory.make("session-nfc"), policy: .keepPendingChanges, clock: TestClock())
            try await session.signIn(composed)
            let first = try #require(await session.engine)
            try await session.signIn(decomposed)
            let second = try #require(await session.engine)
            #expect(second.userID.utf8.elementsEqual(decomposed.utf8), "the second spelling is signed in")
            #expect(first.store.path != second.store.path, "each spelling has a store of its own")
            try await session.signOut()
        }
    }

    @Test("sign-ins and sign-outs called at once happen one after another: one engine at a time, and no erase under a newer engine")
    func transitionsOneAtATime() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let session = Self.session(server: server, directory: TestDirectory.make("session"), policy: .eraseLocalData, clock: clock)
            try await session.signIn("alice")
            for round in 0..<10 {
                async let out: Void = session.signOut()
                async let back: Void = session.signIn("alice")
                _ = try await (out, back)
                guard let engine = await session.engine else { continue }
                #expect(FileManager.default.fileExists(atPath: engine.store.path), "round \(round): the engine's file was erased under it")
                try await Self.write("round-\(round)", in: session)
                let rows = try await engine.store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events") }
                #expect(rows == 1, "round \(round): a fresh store per sign-in under erase")
            }
            try await session.signOut()
        }
    }
}
