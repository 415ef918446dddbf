import Ferry
import FerryProtocol
import FerryTestSupport
import FerryTesting
import Foundation
import GRDB
import Testing

@Suite("Hostile network", .timeLimit(.minutes(1)))
struct HostileNetworkTests {
    @Test("lost responses, resets, 429, 503 and 500 at random: every mutation reaches the server exactly once", arguments: [UInt64(1), 2, 3])
    func exactlyOnce(seed: UInt64) async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<2000 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
            }
            let faults = FaultInjectingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!), seed: seed)
            var configuration = SyncConfiguration()
            configuration.batchSize = 25
            configuration.pullPageSize = 250
            configuration.retry = RetryPolicy(maximumAttempts: 30)
            let client = ClientFixture.client(store: store, server: server, transport: faults, configuration: configuration)
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 2000)
            #expect(faults.injectedFaults["lost response", default: 0] > 0)
            #expect(faults.injectedFaults.count == 5, "every kind of fault was injected: \(faults.injectedFaults)")
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 2000)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "some mutation was applied twice")
        }
    }
}
