import ConcurrencyExtras
import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

@testable import Ferry

/// The token provider is asked as an auth client would ask it: once, again shortly before the
/// token's `exp`, and once more when the server refuses it; never once per request.
@Suite("Tokens", .timeLimit(.minutes(2)))
struct TokenTests {
    /// A JWT-shaped token whose claims say `exp` (its signature is not checked here).
    static func jwt(exp: Date, tag: Int) -> String {
        let claims = Data(#"{"exp":\#(Int(exp.timeIntervalSince1970)),"sub":"alice","tag":\#(tag)}"#.utf8)
        return "eyJhbGciOiJIUzI1NiJ9.\(claims.base64URLEncodedString()).c2ln"
    }

    @Test("a sync of 5,000 changes in five pushes and a pull asks the provider for one token")
    func oneTokenPerSync() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<5000 {
                    try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index])
                }
            }
            let asked = LockIsolated(0)
            let client = FerryClient(
                store: store,
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: {
                    asked.withValue { $0 += 1 }
                    return try await TestServer.token(for: "alice")
                }
            )
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 5000)
            #expect(report.requests >= 6, "five pushes and the pages of the pull")
            #expect(asked.value == 1)
            try await client.sync()
            #expect(asked.value == 1, "the token is still good an hour before its exp")
        }
    }

    @Test("a token is reused until 30 s before its exp, then asked for again; an opaque token until it is refused")
    func renewedBeforeExpiry() async throws {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let now = LockIsolated(start)
        let asked = LockIsolated(0)
        let cache = TokenCache(
            provider: {
                let tag = asked.withValue {
                    $0 += 1
                    return $0
                }
                return Self.jwt(exp: now.value.addingTimeInterval(600), tag: tag)
            },
            now: { now.value }
        )
        let first = try await cache.token()
        now.setValue(start.addingTimeInterval(569))
        #expect(try await cache.token() == first)
        now.setValue(start.addingTimeInterval(570))
        let second = try await cache.token()
        #expect(second != first)
        #expect(asked.value == 2)

        let opaque = TokenCache(
            provider: {
                asked.withValue { $0 += 1 }
                return "opaque-\(asked.value)"
            },
            now: { now.value }
        )
        let kept = try await opaque.token()
        now.setValue(start.addingTimeInterval(1_000_000))
        #expect(try await opaque.token() == kept)
        await opaque.refused("some older token")
        #expect(try await opaque.token() == kept, "only the refusal of the token in hand drops it")
        await opaque.refused(kept)
        #expect(try await opaque.token() != kept)
    }

    @Test("fifty requests that need a token at once share one call of the provider; a failing call is not kept")
    func concurrentRequestsShareOneCall() async throws {
        let asked = LockIsolated(0)
        let cache = TokenCache(provider: {
            let call = asked.withValue {
                $0 += 1
                return $0
            }
            try await Task.sleep(for: .milliseconds(20))  // long enough for the others to queue behind it
            if call == 1 { throw URLError(.notConnectedToInternet) }
            return "token-\(call)"
        })
        await #expect(throws: URLError.self) { try await cache.token() }
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<50 { group.addTask { try await cache.token() } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens == ["token-2"])
        #expect(asked.value == 2)
    }

    @Test("a token the server refuses is replaced once and the request sent again; a second refusal fails the sync")
    func refusedTokenRenewedOnce() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-1', 1)") }
            let asked = LockIsolated(0)
            // The first token is signed with another server's secret (a revoked key); the second is good.
            let client = FerryClient(
                store: store,
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: {
                    let call = asked.withValue {
                        $0 += 1
                        return $0
                    }
                    return try await TestServer.token(for: "alice", secret: call == 1 ? String(repeating: "r", count: 32) : TestServer.secret)
                }
            )
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 1)
            #expect(asked.value == 2)
            #expect(try await client.journal.events().contains { $0.kind == .token })

            let refusedStore = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await refusedStore.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-2', 2)") }
            let alwaysRefused = LockIsolated(0)
            let refusedClient = FerryClient(
                store: refusedStore,
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: {
                    alwaysRefused.withValue { $0 += 1 }
                    return "not-a-token"
                }
            )
            await #expect {
                try await refusedClient.sync()
            } throws: { error in
                guard (error as? FerryError)?.code == .unauthorized else { return false }
                return true
            }
            #expect(alwaysRefused.value == 2, "one renewal per refusal, not the retry budget")
            #expect(await refusedClient.status.pending == 1)
        }
    }
}
