import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// "Why is it stuck?" answered from the store: what is queued and since when, who is sending
/// it, what was set aside and why, how the last run ended.
@Suite("Queue snapshot", .timeLimit(.minutes(1)))
struct QueueSnapshotTests {
    @Test("a store stuck three ways: changes queued, a batch in flight from a process that died, one record too big to send")
    func stuckStore() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            let store = try ClientFixture.openStore(at: path)
            let fresh = try await QueueSnapshot.read(from: store)
            #expect(fresh.queued == 0 && fresh.lease == nil && fresh.lastRun == nil)
            #expect(fresh.explanation == ["Nothing is waiting to be sent.", "This store has never synced."])

            // One record too big to send: the sync sets it aside and says why.
            let big = String(repeating: "x", count: 300_000)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('huge', ?)", arguments: [big]) }
            let client = ClientFixture.client(store: store, server: server)
            try await client.sync()

            // 30 events and 2 notes queued; a process takes 10 of them in flight and dies.
            try await store.database.write { db in
                for index in 0..<30 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
                for index in 0..<2 { try db.execute(sql: "INSERT INTO notes (id, body) VALUES (?, 'n')", arguments: ["n-\(index)"]) }
            }
            let lease = SyncLease(store: store, duration: 60)
            #expect(try await lease.acquire() == nil)
            _ = try #require(try await Outbox(store: store, lease: lease).nextBatch(limit: 10))
            let dead = try deadProcessID()
            try await store.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [dead]) }

            let snapshot = try await client.queueSnapshot()
            #expect(snapshot.queuedByEntity == ["events": 30, "notes": 2])
            #expect(snapshot.inFlight == 10)
            #expect(snapshot.inFlightByEntity == ["events": 10])
            #expect(snapshot.lease?.processID == dead)
            #expect(snapshot.lease?.holderIsRunning == false)
            #expect(snapshot.deadLetters.map(\.entityID) == ["huge"])
            #expect(try #require(snapshot.oldestQueuedAt).timeIntervalSinceNow > -60)
            #expect(snapshot.lastRun?.message == "sync finished")
            let words = snapshot.explanation
            #expect(
                words[0].hasPrefix("Not yet acknowledged by the server: 32 changes (30 events, 2 notes), 10 of them in flight; the oldest was made ")
            )
            #expect(words[1].hasPrefix("Sent at "), "when the batch was taken")
            #expect(
                words[1].contains(
                    " by \(lease.holder), and no process \(dead) runs on this machine: the next sync returns the 10 changes in flight"
                )
            )
            #expect(try #require(snapshot.inFlightSince).timeIntervalSinceNow > -60)
            #expect(words[2].hasPrefix("Set aside for the app to retry or discard: 1 change: data is "))
            #expect(words[2].hasSuffix(" (events/huge)."))
            #expect(words[3].hasPrefix("The last sync succeeded at "))
            #expect(words[3].hasSuffix(": pushed 0, merged 0, pulled 0, in 1 request."), "\(words[3])")
            var fromFile = try QueueSnapshot.read(atPath: path)
            fromFile.takenAt = snapshot.takenAt  // ages are counted to the same moment
            fromFile.status = snapshot.status
            #expect(fromFile == snapshot, "the same snapshot from the file alone")
            #expect(fromFile.explanation == words)

            // The next sync takes the lease from the dead process, resends, and the queue empties.
            try await client.sync()
            let after = try await client.queueSnapshot()
            #expect(after.queued == 0 && after.inFlight == 0 && after.lease == nil)
            #expect(after.explanation.first == "Nothing is waiting to be sent.")
        }
    }

    @Test("while a sync holds a push, the snapshot names the holder and what is on the wire; a failed run says why")
    func syncInProgressAndFailure() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<5 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
            }
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let client = ClientFixture.client(store: store, server: server, transport: gated)
            let run = Task { try await client.sync() }
            while gated.pushes == 0 { await Task.yield() }
            let during = try await QueueSnapshot.read(from: store)
            #expect(during.inFlight == 5 && during.lease?.holderIsRunning == true)
            #expect(
                during.explanation[0].hasPrefix("Not yet acknowledged by the server: 5 changes (5 events), 5 of them in flight; the oldest was made ")
            )
            #expect(during.explanation[1].hasPrefix("Being synced by pid \(ProcessInfo.processInfo.processIdentifier) client "))
            gated.opener.finish()
            _ = try await run.value

            // A server that refuses the token: the last run's error is in the words.
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('late', 1)") }
            let refused = FerryClient(
                store: store,
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: { "not-a-token" }
            )
            await #expect(throws: FerryError.self) { try await refused.sync() }
            let failed = try await refused.queueSnapshot()
            #expect(
                failed.explanation.contains { $0.hasPrefix("The last sync ended at ") && $0.contains("sync failed: the server refused the token") }
            )
            #expect(failed.explanation.contains { $0.hasPrefix("The last successful sync ended at ") })
        }
    }

    @Test("through a session, the snapshot says what the scheduler does: settling, waiting out the minimum interval, offline, running")
    func schedulerState() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, link) = SessionTests.scriptedSession(server: server, clock: clock)
            #expect(try await session.queueSnapshot() == nil)
            link.yield(true)
            try await session.signIn("alice")  // raises launch, which settles for 250 ms
            let scheduler = try #require(await session.engine?.scheduler)
            while await scheduler.online != true { await Task.megaYield() }
            guard case .settling(1, _) = try #require(try await session.queueSnapshot()?.scheduler) else {
                Issue.record("\(String(describing: try await session.queueSnapshot()?.scheduler))")
                return
            }
            var events = EventReader(await scheduler.eventStream())
            await clock.advance(by: .milliseconds(251))
            #expect(await events.runFinished() == 1)
            await session.trigger(.localChange)  // right after a run: the minimum interval holds it
            guard case .waitingForMinimumInterval(1, _) = await scheduler.state else {
                Issue.record("\(await scheduler.state)")
                return
            }
            link.yield(false)
            while await scheduler.online != false { await Task.megaYield() }
            let offline = try #require(try await session.queueSnapshot())
            #expect(offline.scheduler == .waitingForNetwork(triggers: 1))
            #expect(offline.explanation.contains("Offline: 1 trigger waits for the network; the run starts when it returns."))
            try await session.signOut()
            #expect(await scheduler.state == .stopped)
        }
    }

    @Test("ages read as a person reads a wait")
    func ages() {
        let start = Date(timeIntervalSince1970: 0)
        #expect(QueueSnapshot.age(from: start, to: start.addingTimeInterval(59)) == "59 s")
        #expect(QueueSnapshot.age(from: start, to: start.addingTimeInterval(600)) == "10 min")
        #expect(QueueSnapshot.age(from: start, to: start.addingTimeInterval(5 * 3600)) == "5 h")
        #expect(QueueSnapshot.age(from: start, to: start.addingTimeInterval(3 * 86400)) == "3 days")
        #expect(QueueSnapshot.age(from: start.addingTimeInterval(10), to: start) == "0 s")
    }

    @Test("edits coalesced into one mutation keep the time the first was queued: the age counts from the first edit")
    func coalescedKeepsTheFirstTime() async throws {
        let store = try ClientFixture.openStore(at: ClientFixture.storePath())
        try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-1', 1)") }
        let first = try #require(
            try await store.database.read { db in try Double.fetchOne(db, sql: "SELECT queued_at FROM ferry_outbox WHERE state = 0") }
        )
        // Later edits of the same record, queued an hour later (set by hand: no sleeping).
        for value in 2...4 {
            try await store.database.write { db in try db.execute(sql: "UPDATE events SET value = ? WHERE id = 'e-1'", arguments: [value]) }
        }
        try await store.database.write { db in try db.execute(sql: "UPDATE ferry_outbox SET queued_at = queued_at + 3600 WHERE id > 1") }
        let lease = SyncLease(store: store, duration: 60)
        #expect(try await lease.acquire() == nil)
        let batch = try #require(try await Outbox(store: store, lease: lease).nextBatch(limit: 10))
        #expect(batch.mutations.count == 1, "four edits, one mutation")
        let kept = try await store.database.read { db in try Double?.fetchAll(db, sql: "SELECT queued_at FROM ferry_outbox WHERE state != 3") }
        #expect(kept == [first], "one entry is left, and it carries the first edit's time")
        #expect(try await QueueSnapshot.read(from: store).oldestQueuedAt == Date(timeIntervalSince1970: first))
        try await store.close()
    }

    @Test("a session's snapshots follow the queue: writes, the run that sends them, and sign-out, each seen without polling")
    func snapshotUpdates() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let session = SessionTests.session(server: server, directory: TestDirectory.make("snapshots"), clock: clock)
            var updates = session.queueSnapshotUpdates().makeAsyncIterator()
            var seen = await updates.next()
            #expect(seen == .some(nil), "nobody signed in: nil")
            try await session.signIn("alice")
            try await SessionTests.write("e-1", in: session)
            try await SessionTests.write("e-2", in: session)
            repeat { seen = await updates.next() } while seen != nil && seen??.queued != 2
            #expect(seen??.queued == 2)
            await clock.advance(by: .seconds(3))
            repeat { seen = await updates.next() } while seen != nil && !(seen??.queued == 0 && seen??.lastRun != nil)
            #expect(seen??.lastRun?.message == "sync finished")
            try await session.signOut()
            repeat { seen = await updates.next() } while seen != nil && seen != .some(nil)
            #expect(seen == .some(nil), "signed out: nil")
        }
    }
}
