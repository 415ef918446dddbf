import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What one user, or one slow client, may hold of a real `ferry serve`: a body's time, the
/// requests in progress, and the quota a request's bytes cost.
@Suite("Server resources", .timeLimit(.minutes(2)))
struct ServerResourceTests {
    typealias RawConnection = HostileClientTests.RawConnection

    /// A push's request head announcing `length` bytes of body, for `token`.
    static func pushHead(token: String, length: Int) -> String {
        "POST /v1/push HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(token)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(length)\r\n\r\n"
    }

    @Test("a push body trickled a byte at a time is answered 408 at the body timeout and its connection closed, though bytes keep coming")
    func slowBody() async throws {
        let directory = TestDirectory.make("slow-body")
        let database = try await TestDatabase.make(.sqlite)
        let (processes, servers) = try await MultiProcessTests.serve(1, on: database, options: ["--body-timeout", "1"], in: directory)
        defer { for process in processes { process.process.terminate() } }
        let port = Int(servers[0].baseURL.split(separator: ":").last!)!
        let token = try await TestServer.token(for: "alice")
        let connection = try RawConnection(port: port)
        connection.send(Self.pushHead(token: token, length: 100_000) + "{\"clientID\":")
        // A byte every 100 ms, from a thread of its own, until the connection is gone: the idle
        // timeout (30 s) never fires, only the body's deadline can end this.
        let trickling = Thread {
            while Glibc.send(connection.socket, " ", 1, Int32(MSG_NOSIGNAL)) == 1 { usleep(100_000) }
        }
        trickling.start()
        let answer = try #require(await connection.closed(), "the server never closed the connection")
        #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer.prefix(200))")
        #expect(answer.contains("request_timeout") && answer.contains("within 1 s"), "\(answer)")
        // The server is fine and nothing was written.
        #expect(try await servers[0].pullAll(token: token).isEmpty)
    }

    @Test(
        "one user's requests in progress are capped before their bodies are read: the next is 429 with Retry-After, others are served",
        arguments: StorageBackend.allCases
    )
    func requestsInProgressPerUser(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("in-progress")
        let database = try await TestDatabase.make(backend)
        let (processes, servers) = try await MultiProcessTests.serve(
            1,
            on: database,
            rateLimit: "1000/60",
            options: ["--max-requests-per-user", "2"],
            in: directory
        )
        defer { for process in processes { process.process.terminate() } }
        let server = servers[0]
        let port = Int(server.baseURL.split(separator: ":").last!)!
        let alice = try await TestServer.token(for: "alice")
        let bob = try await TestServer.token(for: "bob")
        // Two pushes of Alice's that announce 3 MB and send a few bytes: both are in progress.
        func stall() throws -> RawConnection {
            let connection = try RawConnection(port: port)
            connection.send(Self.pushHead(token: alice, length: 3_000_000) + "{")
            return connection
        }
        var stalled = try (0..<2).map { _ in try stall() }
        let small = PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "notes", entityID: "n", data: .value(1))])
        // Once both are admitted, every further request of Alice's is refused at once.
        var refused: Reply?
        for _ in 0..<200 {
            // A stalled push that came in while a probe was in progress was refused itself: replace it.
            stalled = try stalled.map { connection in
                var byte: UInt8 = 0
                return recv(connection.socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0 ? try stall() : connection
            }
            let reply = try await server.push(small, token: alice)
            if reply.status == 429 {
                refused = reply
                break
            }
            try await Task.sleep(for: .milliseconds(10))  // polling for the server to admit the stalled ones
        }
        let reply = try #require(refused, "Alice's third request in progress was never refused")
        #expect(reply.errorCode == "rate_limited")
        #expect(reply.headers["Retry-After"] == ["1"])
        #expect(reply.errorMessage?.contains("2 requests of this user are already in progress") == true, "\(reply.errorMessage ?? "")")
        #expect(try await server.pull(token: alice).status == 429, "a pull counts too")
        // Bob is served meanwhile.
        let bobs = try await server.pushOK(small, token: bob)
        #expect(bobs.results.map(\.status) == [.applied])
        // When Alice's stalled requests end (she hangs up), she is served again.
        for connection in stalled { shutdown(connection.socket, Int32(SHUT_RDWR)) }
        var served = false
        for _ in 0..<200 where !served {
            served = try await server.push(small, token: alice).status == 200
            if !served { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(served, "Alice's requests are admitted again once hers in progress ended")
    }

    @Test("a request's bytes count against the quota: a 3 MB push costs 4 requests, a small one 1", arguments: StorageBackend.allCases)
    func quotaCountsBytes(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rateLimit: RateLimitPolicy(requests: 100, window: .seconds(3600))) { server in
            let token = try await TestServer.token(for: "alice")
            let large = String(repeating: "x", count: 250_000)
            let mutations: [Mutation] = (1...12).map { .upsert(id: Int64($0), entity: "docs", entityID: "d\($0)", data: ["body": .string(large)]) }
            let first = try await server.push(PushRequest(clientID: "c1", mutations: mutations), token: token)
            #expect(first.status == 200)
            #expect(first.headers["RateLimit-Remaining"] == ["99"], "the request itself costs one token, charged before it runs")
            let second = try await server.push(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 13, entity: "docs", entityID: "small", data: .value(1))]),
                token: token
            )
            // 3,000,000 bytes of body: two whole MiB beyond its first token.
            #expect(second.headers["RateLimit-Remaining"] == ["96"], "\(second.headers["RateLimit-Remaining"])")
            let third = try await server.pull(token: token)
            #expect(third.headers["RateLimit-Remaining"] == ["95"], "a small push costs one")
            // The pull's page (about 3 MB) is charged once answered.
            #expect(try await server.pull(token: token, limit: 1).headers["RateLimit-Remaining"] == ["92"])
        }
    }
}
