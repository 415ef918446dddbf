import Clocks
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// One client syncs a store at a time, across processes: each `FerryStore` here is opened on
/// its own, with its own connections, as an app and its extension open one App Group file.
@Suite("Sync lease", .timeLimit(.minutes(1)))
struct SyncLeaseTests {
    static func insert(_ range: Range<Int>, into store: FerryStore) async throws {
        try await store.database.write { db in
            for index in range { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
        }
    }

    @Test("a second client on the same store waits while the first syncs, then sends what was written meanwhile: nothing lost, nothing doubled")
    func secondClientWaits() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            let app = try ClientFixture.openStore(at: path)
            let widget = try ClientFixture.openStore(at: path)
            try await Self.insert(0..<300, into: app)
            let gated = GatedTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let appClient = ClientFixture.client(store: app, server: server, transport: gated)
            let appRun = Task { try await appClient.sync() }
            while gated.pushes == 0 { await Task.megaYield() }  // the app's batch is on the wire

            let clock = TestClock()
            let widgetClient = ClientFixture.client(store: widget, server: server, clock: clock)
            let widgetRun = Task { try await widgetClient.sync() }
            await clock.untilSomeoneSleeps()
            guard case .waiting(_, let reason) = await widgetClient.status.phase else {
                Issue.record("the widget's sync should wait, not run beside the app's: \(await widgetClient.status.phase)")
                return
            }
            #expect(reason.contains("another process"))
            try await Self.insert(300..<400, into: widget)

            gated.opener.yield(())
            gated.opener.finish()
            #expect(try await appRun.value.upload.acknowledged >= 300)
            await clock.advance(by: .milliseconds(250))
            let widgetReport = try await widgetRun.value

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 400)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "a change was applied twice")
            #expect(await widgetClient.status.pending == 0)
            #expect(widgetReport.upload.acknowledged + (try await appRun.value.upload.acknowledged) == 400)
        }
    }

    @Test("a client whose lease was taken over applies nothing more: its answer is left to the new holder, which resends the batch")
    func lostLeaseAppliesNothing() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            let app = try ClientFixture.openStore(at: path)
            let widget = try ClientFixture.openStore(at: path)
            try await Self.insert(0..<10, into: app)
            let token = try await TestServer.token(for: "alice")
            let lease = SyncLease(store: app, duration: 60)
            #expect(try await lease.acquire() == nil)
            let outbox = Outbox(store: app, lease: lease)
            let batch = try #require(try await outbox.nextBatch(limit: 500))
            let reply = try await server.send(.POST, "/v1/push", token: token, body: batch.requestBody())
            // The app is suspended past its lease; the widget takes over and syncs everything.
            try await app.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET expires_at = 0") }
            try await Self.insert(10..<12, into: widget)
            let report = try await ClientFixture.client(store: widget, server: server).sync()
            #expect(report.upload.acknowledged == 12)

            // The app wakes up with its answer: applying it fails and changes nothing.
            await #expect(throws: FerryError.self) {
                try await outbox.apply(PushResponse.decode(from: reply.body), to: batch, policy: .serverWins)
            }
            await #expect(throws: FerryError.self) { try await outbox.nextBatch(limit: 500) }
            let queued = try await app.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state IN (0, 1, 2)") }
            #expect(queued == 0)
            let remote = try await server.pullAll(token: token)
            #expect(remote.count == 12)
            #expect(remote.values.allSatisfy { $0.version == 1 })
        }
    }

    @Test("a lease whose holder's process is gone is taken at once, and its in-flight entries go out again exactly once")
    func deadHolder() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            let app = try ClientFixture.openStore(at: path)
            try await Self.insert(0..<50, into: app)
            let lease = SyncLease(store: app, duration: 3600)
            #expect(try await lease.acquire() == nil)
            _ = try #require(try await Outbox(store: app, lease: lease).nextBatch(limit: 20))
            try await app.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [try deadProcessID()]) }

            let widget = try ClientFixture.openStore(at: path)
            let report = try await ClientFixture.client(store: widget, server: server).sync()
            #expect(report.upload.acknowledged == 50)
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 50)
        }
    }
}
