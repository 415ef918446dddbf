import Clocks
import ConcurrencyExtras
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// An app below the server's minimum version (PROTOCOL.md, "Versions"): told once, sends
/// nothing more, loses nothing, and its queue goes once the app is updated.
@Suite("Update required", .timeLimit(.minutes(1)))
struct UpdateRequiredTests {
    static let policy = UpdatePolicy(appVersion: VersionNumber("2.0"), message: "Please update Field Jobs to 2.0 to keep syncing.")

    static func configuration(app version: String) -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.app = AppIdentity(version: version, schemaVersion: 3, platform: "ios")
        return configuration
    }

    /// A transport that counts what reaches the server: requests and stream openings.
    static func counting(_ server: TestServer, _ count: LockIsolated<Int>) -> InterceptingTransport {
        InterceptingTransport(
            URLSessionTransport(baseURL: URL(string: server.baseURL)!),
            send: { request, next in
                count.withValue { $0 += 1 }
                return try await next(request)
            },
            stream: { request, next in
                count.withValue { $0 += 1 }
                return try await next(request)
            }
        )
    }

    static func write(_ ids: [String], in store: FerryStore) async throws {
        try await store.database.write { db in
            for id in ids { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: [id]) }
        }
    }

    @Test("a client below the minimum gets updateRequired once, sends nothing more, keeps its queue and rows, and an updated app sends it all")
    func refusedThenUpdated() async throws {
        try await TestServer.run(updatePolicy: Self.policy) { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.write((0..<30).map { "e-\($0)" }, in: store)
            let exchanges = LockIsolated(0)
            let old = ClientFixture.client(
                store: store,
                server: server,
                transport: Self.counting(server, exchanges),
                configuration: Self.configuration(app: "1.9")
            )
            await #expect(throws: FerryError.self) { try await old.sync() }
            #expect(exchanges.value == 1, "the first answer said it all")
            let status = await old.status
            #expect(status.updateRequired?.message == "Please update Field Jobs to 2.0 to keep syncing.")
            #expect(status.updateRequired?.minimum == UpdateRequirement(appVersion: "2.0"))
            #expect(status.progressText == "Update required: Please update Field Jobs to 2.0 to keep syncing.")
            for _ in 0..<5 {
                await #expect {
                    try await old.sync()
                } throws: { error in
                    (error as? FerryError)?.code == .updateRequired && "\(error)".contains("Field Jobs")
                }
            }
            #expect(exchanges.value == 1, "nothing more is sent")
            // The store stays usable offline: a new change is captured and waits.
            try await Self.write(["while-refused"], in: store)
            #expect(await old.status.pending == 31)
            #expect(try await old.journal.events().filter { $0.kind == .updateRequired }.count == 1)
            await old.stop()

            // The app is updated: the same store, a newer version. Its queue goes as if nothing happened.
            let updated = ClientFixture.client(store: store, server: server, configuration: Self.configuration(app: "2.0.1"))
            let report = try await updated.sync()
            #expect(report.upload.acknowledged == 31)
            #expect(await updated.status.updateRequired == nil)
            #expect(await updated.status.pending == 0)
            let pull = try await server.send(
                .GET,
                "/v1/pull?limit=1000",
                token: try await TestServer.token(for: "alice"),
                headers: [(ProtocolHeaders.appVersion, "2.0")]
            )
            #expect(try pull.decode(PullResponse.self).changes.count == 31)
            await updated.stop()
            try await store.close()
        }
    }

    @Test(
        "what the app says of itself that the server would refuse is not sent: a date as schema version, an empty platform; nothing is dead-lettered"
    )
    func unsendableIdentity() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.write((0..<5).map { "e-\($0)" }, in: store)
            var configuration = SyncConfiguration()
            configuration.app = AppIdentity(version: "3.0", schemaVersion: 2_024_061_501, platform: "")
            let client = ClientFixture.client(store: store, server: server, configuration: configuration)
            #expect(try await client.sync().upload.acknowledged == 5)
            #expect(try await client.deadLetters().isEmpty)
            await client.stop()
            try await store.close()
        }
    }

    @Test(
        "a session below the minimum, its event stream on and periodic runs every 5 s, makes no request after the first answers through an hour of its clock"
    )
    func noRetryLoop() async throws {
        try await TestServer.run(updatePolicy: Self.policy) { server in
            let clock = TestClock()
            let exchanges = LockIsolated(0)
            var configuration = SessionConfiguration(
                storeDirectory: TestDirectory.make("session"),
                tables: [ClientFixture.events, ClientFixture.notes],
                schema: ClientFixture.schema()
            )
            configuration.sync = Self.configuration(app: "1.0")
            configuration.scheduler.periodicInterval = .seconds(5)
            configuration.liveUpdates = true
            let transport = Self.counting(server, exchanges)
            let session = SyncSession(
                configuration: configuration,
                transport: transport,
                token: { user in try await TestServer.token(for: user) },
                connectivity: HealthProbeMonitor(transport: transport, clock: clock, interval: .seconds(30)),
                clock: clock
            )
            try await session.signIn("alice")
            let store = try #require(await session.engine?.store)
            try await Self.write((0..<10).map { "e-\($0)" }, in: store)
            await session.setActive(true)
            // Until a run has met the refusal (the stream may meet it first), and the scheduler,
            // which writes its lines after the fact, has written that run's end.
            let journal = try #require(await session.engine?.client.journal)
            while true {
                let closed = await session.engine?.scheduler.state == .updateRequired
                let ended = try await journal.events().contains { $0.kind == .schedulerRun && $0[.outcome] == "failed" }
                if closed && ended { break }
                await clock.advance(by: .seconds(1))
                await Task.megaYield()
            }
            await Task.megaYield()
            let afterRefusal = exchanges.value
            #expect(afterRefusal <= 3, "a health probe, a run's request and the stream's opening at most")
            let linesAfterRefusal = try await journal.events()
            for _ in 0..<120 {
                try await Self.write(["tick-\(UUID())"], in: store)
                await clock.advance(by: .seconds(30))
            }
            await Task.megaYield()
            #expect(exchanges.value == afterRefusal, "no request after the refusal, not even a health probe")
            await #expect(throws: FerryError.self) { try await session.sync() }
            let added = try await journal.events().dropFirst(linesAfterRefusal.count)
            #expect(added.isEmpty, "no run, no lease, no trigger's line: the refusal was said once; added: \(added.map(\.message))")
            #expect(await session.engine?.scheduler.state == .updateRequired)
            #expect(await session.status.updateRequired != nil)
            #expect(await session.status.pending >= 10)
            try await session.signOut()
        }
    }
}
