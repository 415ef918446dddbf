import Clocks
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

@Suite("Rate limiting", .timeLimit(.minutes(1)))
struct RateLimitTests {
    @Test(
        "every authenticated response carries RateLimit-*; over the quota the server answers 429 with Retry-After and changes nothing",
        arguments: StorageBackend.allCases
    )
    func headersAnd429(backend: StorageBackend) async throws {
        let clock = TestClock()
        try await TestServer.run(backend: backend, rateLimit: RateLimitPolicy(requests: 3, window: .seconds(60)), rateLimitClock: clock) { server in
            let token = try await TestServer.token(for: "alice")
            var remaining: [String] = []
            for id in 1...3 {
                let reply = try await server.push(
                    PushRequest(clientID: "c", mutations: [.upsert(id: Int64(id), entity: "e", entityID: "\(id)", data: .value(1))]),
                    token: token
                )
                #expect(reply.status == 200)
                #expect(reply.headers["RateLimit-Limit"] == ["3"])
                remaining += reply.headers["RateLimit-Remaining"]
                #expect(Int(reply.headers["RateLimit-Reset"].first ?? "") ?? 0 >= 1)
            }
            #expect(remaining == ["2", "1", "0"])

            let limited = try await server.push(
                PushRequest(clientID: "c", mutations: [.upsert(id: 4, entity: "e", entityID: "4", data: .value(1))]),
                token: token
            )
            #expect(limited.status == 429)
            #expect(limited.errorCode == "rate_limited")
            let retryAfter = Int(limited.headers["Retry-After"].first ?? "") ?? 0
            #expect((1...20).contains(retryAfter))  // one request refills in 60/3 = 20 s
            #expect(limited.headers["RateLimit-Remaining"] == ["0"])
            #expect(limited.headers["RateLimit-Limit"] == ["3"])

            // Errors carry the headers too, and another user has a quota of their own.
            let bob = try await TestServer.token(for: "bob")
            let badRequest = try await server.send(.POST, "/v1/push", token: bob, body: Data("{".utf8))
            #expect(badRequest.status == 400)
            #expect(badRequest.headers["RateLimit-Remaining"] == ["2"])
            // Health and metrics are not limited.
            for _ in 0..<5 { #expect(try await server.send(.GET, "/v1/health").status == 200) }
            #expect(try await server.send(.GET, "/metrics").status == 200)

            // Once Retry-After has passed the quota is back, and the refused push left nothing behind.
            await clock.advance(by: .seconds(retryAfter))
            let records = try await server.pullOK(token: token)
            #expect(records.changes.map(\.entityID) == ["1", "2", "3"])
        }
    }

    @Test("an upload refused after its body (wrong digest) is charged for every MiB it sent, as one kept is", arguments: StorageBackend.allCases)
    func refusedUploadCharged(backend: StorageBackend) async throws {
        let clock = TestClock()
        try await TestServer.run(backend: backend, rateLimit: RateLimitPolicy(requests: 20, window: .seconds(60)), rateLimitClock: clock) { server in
            let token = try await TestServer.token(for: "alice")
            let bytes = AttachmentEndpointTests.photo(3 * 1024 * 1024, seed: 31)
            let wrong = AttachmentEndpointTests.digest(Array(bytes.dropLast()))
            let refused = try await AttachmentEndpointTests.upload(server, .POST, "/v1/attachments/\(wrong)", token: token, body: bytes)
            #expect(refused.status == 422 && refused.errorCode == "digest_mismatch")
            let next = try await server.send(.GET, "/v1/pull", token: token)
            #expect(next.headers["RateLimit-Remaining"] == ["15"], "20, less 1 for the upload, 3 for its MiB, 1 for this pull")
            // Refused before its body is read (too large): the server still reads it, and charges it.
            let tooLarge = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                "/v1/attachments/\(wrong)",
                token: token,
                headers: [("Upload-Length", "\(6 << 30)")],
                body: bytes
            )
            #expect(tooLarge.status == 413)
            let after = try await server.send(.GET, "/v1/pull", token: token)
            #expect(after.headers["RateLimit-Remaining"] == ["10"], "15, less 1 for the upload, 3 for its MiB, 1 for this pull")
        }
    }

    @Test("the bucket allows the whole quota as a burst and refills continuously (test clock)", arguments: StorageBackend.allCases)
    func refill(backend: StorageBackend) async throws {
        let clock = TestClock()
        let storage = try await TestDatabase.make(backend).open()
        let limiter = try #require(TestServer.limiter(RateLimitPolicy(requests: 300, window: .seconds(60)), storage: storage, clock: clock))
        for expected in stride(from: 299, through: 0, by: -1) {
            let decision = try await limiter.acquire(for: "u")
            #expect(decision.allowed)
            #expect(decision.remaining == expected)
        }
        let refused = try await limiter.acquire(for: "u")
        #expect(!refused.allowed)
        #expect(refused.retryAfterSeconds == 1)  // 5 requests per second refill
        #expect(refused.resetSeconds == 60)
        await clock.advance(by: .milliseconds(200))
        #expect(try await limiter.acquire(for: "u").allowed)
        #expect(try await !limiter.acquire(for: "u").allowed)
        await clock.advance(by: .seconds(60))
        let refilled = try await limiter.acquire(for: "u")
        #expect(refilled.remaining == 299)
        #expect(refilled.resetSeconds == 1)
        #expect(try await limiter.acquire(for: "other").remaining == 299)
        try await storage.close()
    }

    @Test("user ids that differ only in Unicode normalization have quotas of their own", arguments: StorageBackend.allCases)
    func normalizationApart(backend: StorageBackend) async throws {
        let storage = try await TestDatabase.make(backend).open()
        let limiter = try #require(TestServer.limiter(RateLimitPolicy(requests: 3, window: .seconds(60)), storage: storage, clock: TestClock()))
        let composed = "zo\u{EB}"
        let decomposed = "zoe\u{308}"
        #expect(composed == decomposed, "Swift calls them equal; the database does not")
        for _ in 0..<3 { #expect(try await limiter.acquire(for: composed).allowed) }
        #expect(try await !limiter.acquire(for: composed).allowed)
        #expect(try await limiter.acquire(for: decomposed).remaining == 2, "the other spelling is another user with a full quota")
        try await storage.close()
    }

    @Test("--rate-limit values: N/SECONDS, off, and clear refusals")
    func parsing() throws {
        #expect(try RateLimitPolicy.parse("300/60") == .default)
        #expect(try RateLimitPolicy.parse("off") == nil)
        #expect(try RateLimitPolicy.parse("1000000000/31536000") == RateLimitPolicy(requests: 1_000_000_000, window: .seconds(31_536_000)))
        for bad in ["", "300", "300/", "/60", "0/60", "10/0", "-1/60", "a/b", "1/2/3", "1/9223372036854775807", "1000000001/60", "1/31536001"] {
            #expect(throws: RateLimitPolicyError.self, "\(bad)") { try RateLimitPolicy.parse(bad) }
        }
        #expect(RateLimitPolicy.default.description == "300/60")
        #expect(RateLimitPolicy(requests: 5, window: .milliseconds(1500)).description == "5/1.5")
    }
}
