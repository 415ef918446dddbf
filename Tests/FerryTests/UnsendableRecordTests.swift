import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// One record the protocol or the server cannot take never holds back the records behind it.
@Suite("Unsendable records", .timeLimit(.minutes(1)))
struct UnsendableRecordTests {
    @Test("a REAL column holding Infinity and a 5 MiB record are dead-lettered unsent, with why; the records after them reach the server")
    func refusedBeforeSending() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, value) VALUES ('first', 1)")
                try db.execute(sql: "INSERT INTO events (id, value) VALUES ('infinite', 9e999)")
                try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('huge', ?)", arguments: [String(repeating: "x", count: 5 * 1024 * 1024)])
                for index in 0..<100 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["after-\(index)", index]) }
            }
            let client = ClientFixture.client(store: store, server: server)
            let report = try await client.sync()
            #expect(report.upload.deadLettered == 2)
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["infinite", "huge"])
            #expect(dead.first?.reason.contains("Infinity") == true, "\(dead)")
            #expect(dead.last?.reason.contains("262144") == true, "\(dead)")
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 101)
            #expect(remote["events/infinite"] == nil)
        }
    }

    @Test(
        "a batch refused whole (413 from a proxy) is split down to the one record at fault, dead-lettered with the server's reason; the rest arrive"
    )
    func splitToTheCulprit() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<60 {
                    // 1 KB each, but one of 100 KB: within the protocol's 256 KiB, over the proxy's 64 KiB.
                    let kind = String(repeating: "k", count: index == 17 ? 100_000 : 1_000)
                    try db.execute(sql: "INSERT INTO events (id, kind) VALUES (?, ?)", arguments: ["e-\(index)", kind])
                }
            }
            let proxy = InterceptingTransport.bodyLimit(64 * 1024, before: URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let client = ClientFixture.client(store: store, server: server, transport: proxy)
            let report = try await client.sync()
            #expect(report.upload.deadLettered == 1)
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["e-17"])
            #expect(dead.first?.reason.contains("413") == true)
            #expect(dead.first?.reason.contains("65536") == true, "the server's own words: \(dead)")
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 59)
            #expect(remote.values.allSatisfy { $0.version == 1 })
        }
    }
}
