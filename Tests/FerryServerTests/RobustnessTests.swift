import AsyncHTTPClient
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@Suite("Robustness", .timeLimit(.minutes(1)))
struct RobustnessTests {
    @Test("unknown paths answer 404 and wrong methods 405, both in the JSON envelope with a request id")
    func routing() async throws {
        try await RouterServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let unknown = try await server.send(.GET, "/v2/push", token: token)
            #expect(unknown.status == 404)
            #expect(unknown.errorCode == "not_found")
            #expect(!unknown.headers["X-Request-ID"].isEmpty)
            for (method, path, allowed) in [
                (HTTPMethod.GET, "/v1/push", "POST"), (.POST, "/v1/pull", "GET"), (.DELETE, "/v1/health", "GET"), (.PUT, "/metrics", "GET"),
            ] {
                let reply = try await server.send(method, path, token: token)
                #expect(reply.status == 405, "\(method) \(path)")
                #expect(reply.errorCode == "method_not_allowed")
                #expect(reply.headers["Allow"] == [allowed])
            }
        }
    }

    @Test("a body over 4 MiB without Content-Length is cut off at the limit and answered 413")
    func streamedOversizedBody() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            var request = HTTPClientRequest(url: server.baseURL + "/v1/push")
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let chunk = ByteBuffer(repeating: UInt8(ascii: " "), count: 256 * 1024)
            let chunks = AsyncStream<ByteBuffer> { continuation in
                for _ in 0..<24 { continuation.yield(chunk) }  // 6 MiB, streamed with chunked encoding
                continuation.finish()
            }
            request.body = .stream(chunks, length: .unknown)
            do {
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                #expect(response.status.code == 413)
                let body = try await response.body.collect(upTo: 1 << 20)
                #expect(String(buffer: body).contains("batch_too_large"))
            } catch {
                // The server may close the connection before the client has finished
                // uploading; what matters is that it never accepted the body.
            }
            #expect(try await server.pullAll(token: token).isEmpty)
        }
    }

    @Test("malformed bodies get 400 with a message naming the field")
    func malformedBodies() async throws {
        try await RouterServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let cases: [(String, String)] = [
                ("", "JSON"),
                ("[]", "body"),
                ("{\"clientID\": \"c\"}", "mutations"),
                ("{\"clientID\": 5, \"mutations\": []}", "clientID"),
                ("{\"clientID\": \"bad id!\", \"mutations\": []}", "clientID"),
                ("{\"clientID\": \"c\", \"mutations\": {}}", "mutations"),
                ("{\"clientID\": \"c\", \"mutations\": [{\"entity\": \"e\", \"entityID\": \"x\", \"op\": \"delete\"}]}", "mutations[0].id"),
                ("{\"clientID\": \"c\", \"mutations\": [{\"id\": 1, \"entity\": \"e\", \"entityID\": \"x\", \"op\": \"merge\"}]}", "mutations[0].op"),
                (
                    "{\"clientID\": \"c\", \"mutations\": [{\"id\": 1, \"entity\": \"e\", \"entityID\": \"x\", \"op\": \"upsert\", \"data\": [1]}]}",
                    "mutations[0].data"
                ),
                (
                    "{\"clientID\": \"c\", \"mutations\": [{\"id\": 1.5, \"entity\": \"e\", \"entityID\": \"x\", \"op\": \"delete\"}]}",
                    "mutations[0].id"
                ),
            ]
            for (body, field) in cases {
                let reply = try await server.send(.POST, "/v1/push", token: token, body: Data(body.utf8))
                #expect(reply.status == 400, "\(body)")
                #expect(reply.errorCode == "bad_request")
                #expect(reply.errorMessage?.contains(field) == true, "\(body): \(reply.errorMessage ?? "")")
            }
            #expect(try await server.pullAll(token: token).isEmpty)
        }
    }

    @Test("hundreds of randomly mangled bodies and queries never produce a 5xx")
    func fuzz() async throws {
        try await RouterServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let seed = try JSONEncoder().encode(
                PushRequest(
                    clientID: "fuzz",
                    mutations: [
                        .upsert(
                            id: 1,
                            entity: "events",
                            entityID: "e-1",
                            data: ["n": .integer(1), "s": .string("x"), "a": .array([.bool(true), .null])],
                            naturalKey: "k"
                        ),
                        .upsert(id: 2, entity: "events", entityID: "e-2", data: .value(2), baseVersion: 0),
                        .delete(id: 3, entity: "events", entityID: "e-1"),
                    ]
                )
            )
            var generator = SeededGenerator(seed: 0xF3_22)
            let alphabet = Array("{}[]\":,0123456789-.eE truefalsnul\\u00ff\u{1F600}".utf8)
            for round in 0..<300 {
                var bytes = [UInt8](seed)
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    let position = Int.random(in: 0..<bytes.count, using: &generator)
                    switch Int.random(in: 0..<4, using: &generator) {
                    case 0: bytes[position] = alphabet.randomElement(using: &generator)!
                    case 1: bytes.remove(at: position)
                    case 2: bytes.insert(alphabet.randomElement(using: &generator)!, at: position)
                    default: bytes = Array(bytes[..<position])
                    }
                    if bytes.isEmpty { bytes = [UInt8(ascii: "{")] }
                }
                let reply = try await server.send(.POST, "/v1/push", token: token, body: Data(bytes))
                #expect(reply.status < 500, "round \(round): \(String(decoding: bytes, as: UTF8.self)) -> \(reply.status)")
                #expect([200, 400, 413].contains(reply.status))
                if reply.status != 200 { #expect(reply.errorCode != nil) }
            }
            for query in [
                "cursor=%ZZ", "limit=99999999999999999999", "cursor=c1.____&limit=1", "limit=&cursor=", "cursor=c1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            ] {
                let reply = try await server.send(.GET, "/v1/pull?\(query)", token: token)
                #expect(reply.status == 400, "\(query)")
            }
        }
    }

    @Test("/metrics exposes requests by endpoint and status, mutations by status, rate-limited requests and latency")
    func metrics() async throws {
        try await TestServer.run(rateLimit: RateLimitPolicy(requests: 2, window: .seconds(60))) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        .upsert(id: 1, entity: "e", entityID: "x", data: .value(1)), .upsert(id: 2, entity: "E", entityID: "x", data: .value(1)),
                    ]
                ),
                token: token
            )
            _ = try await server.pull(token: token)
            _ = try await server.pull(token: token)
            let text = String(decoding: try await server.send(.GET, "/metrics").body, as: UTF8.self)
            #expect(text.contains(#"ferry_http_requests_total{endpoint="/v1/push",status="200"} 1"#))
            #expect(text.contains(#"ferry_http_requests_total{endpoint="/v1/pull",status="429"} 1"#))
            #expect(text.contains(#"ferry_mutations_total{status="applied"} 1"#))
            #expect(text.contains(#"ferry_mutations_total{status="rejected"} 1"#))
            #expect(text.contains(#"ferry_rate_limited_total{reason="quota"} 1"#))
            #expect(text.contains("ferry_http_request_duration_seconds_count"))
        }
    }

    @Test("when the database is gone, health and push answer 503 with Retry-After", arguments: StorageBackend.allCases)
    func databaseUnavailable(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            try await server.storage.close()
            let health = try await server.send(.GET, "/v1/health")
            #expect(health.status == 503)
            #expect(health.errorCode == "unavailable")
            #expect(health.headers["Retry-After"] == ["5"])
            let push = try await server.push(PushRequest(clientID: "c", mutations: [.delete(id: 1, entity: "e", entityID: "x")]), token: token)
            #expect(push.status == 503)
            #expect(push.headers["Retry-After"] == ["5"])
            #expect(try await server.pull(token: token).status == 503)
        }
    }

    /// Two `ferry serve` started at once on a new file both create it, turn on WAL and migrate
    /// it: neither may fail on the other's locks. SQLite's locks hold between the connections of
    /// one process as between processes, so four storages opened at once stand for four processes.
    @Test("several storages opening one new SQLite file at once all open it, twenty times over")
    func concurrentOpenOfNewFile() async throws {
        for _ in 0..<20 {
            let path = TestServer.temporaryDatabasePath()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { _ = try SQLiteSyncStorage(path: path) }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test("an unreadable database path is refused with a clear error")
    func unreadablePath() {
        #expect(throws: StorageError.self) { _ = try SQLiteSyncStorage(path: "/nonexistent-dir/ferry.sqlite") }
    }
}

/// A deterministic generator, so a fuzz failure can be reproduced.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
