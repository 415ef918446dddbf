import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

/// Issue 12's security list: tokens of every kind refused, no way into another user's
/// records, secrets never in a log line, failed authentication counted.
@Suite("Security", .timeLimit(.minutes(1)))
struct SecurityTests {
    @Test("a token claiming any algorithm but HS256 is refused, even when signed with the right key")
    func everyOtherAlgorithm() async throws {
        try await RouterServer.run { server in
            let now = Int(Date().timeIntervalSince1970)
            for algorithm in [
                "none", "None", "NONE", "nOnE", "hs256", "HS256 ", "HS384", "HS512", "RS256", "RS512", "ES256", "ES384", "PS256", "EdDSA", "",
            ] {
                let token = try TestServer.handMadeToken(header: ["alg": algorithm, "typ": "JWT"], claims: ["sub": "alice", "exp": now + 600])
                let reply = try await server.pull(token: token)
                #expect(reply.status == 401, "alg '\(algorithm)'")
                #expect(reply.errorMessage?.contains("HS256 only") == true, "alg '\(algorithm)': \(reply.errorMessage ?? "")")
            }
            let unsigned = try TestServer.handMadeToken(header: ["alg": "HS256"], claims: ["sub": "alice", "exp": now + 600], signature: false)
            #expect(try await server.pull(token: unsigned).status == 401, "an empty signature")
        }
    }

    @Test("another user's ids, natural keys, client id and mutation ids reach nothing of the first user's and reveal nothing")
    func noCrossUserAccess() async throws {
        try await RouterServer.run { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "same-client",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "n", data: ["secret": .string("alice's")]),
                        .upsert(id: 2, entity: "events", entityID: "e-alice", data: ["secret": .string("alice's")], naturalKey: "hk-1"),
                    ]
                ),
                token: alice
            )

            // Bob reuses Alice's client id, mutation ids, record ids and natural key.
            let answer = try await server.pushOK(
                PushRequest(
                    clientID: "same-client",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "n", data: ["mine": .string("bob's")], baseVersion: 1),
                        .upsert(id: 2, entity: "events", entityID: "e-bob", data: ["mine": .string("bob's")], naturalKey: "hk-1"),
                        .delete(id: 3, entity: "events", entityID: "e-alice"),
                    ]
                ),
                token: bob
            )
            #expect(answer.results.map(\.status) == [.conflict, .applied, .applied], "no duplicate or merge across users")
            #expect(answer.results[0].current == nil, "a conflict shows bob nothing of alice's record")
            #expect(answer.results[1].entityID == "e-bob")
            #expect(answer.results[2].version == nil, "bob deletes nothing: he has no e-alice")
            let resent = try await server.pushOK(
                PushRequest(
                    clientID: "same-client",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "n", data: ["mine": .string("bob's")], baseVersion: 1)
                    ]
                ),
                token: bob
            )
            #expect(resent.results[0].current == nil, "a replay shows bob nothing of alice's record either")

            let aliceRecords = try await server.pullAll(token: alice)
            #expect(aliceRecords["notes/n"]?.data == ["secret": .string("alice's")])
            #expect(aliceRecords["events/e-alice"]?.op == .upsert)
            #expect(aliceRecords["events/e-alice"]?.naturalKey == "hk-1")
            #expect(aliceRecords.count == 2)
            let bobRecords = try await server.pullAll(token: bob)
            #expect(Set(bobRecords.keys) == ["events/e-bob"])
            #expect(!String(decoding: try JSONEncoder().encode(Array(bobRecords.values)), as: UTF8.self).contains("alice"))
        }
    }

    @Test(
        "after every kind of request and every bad token, no log line holds a token or the secret; one access line per request; failures counted in /metrics"
    )
    func logsAndMetrics() async throws {
        let log = CapturedLog()
        try await TestServer.run(rateLimit: .default, logger: log.logger()) { server in
            let good = try await TestServer.token(for: "alice")
            var tokens = [good]
            var requests = 0
            var refused = 0
            _ = try await server.send(.GET, "/v1/pull", token: good, headers: [("Ferry-Client-ID", "phone-1")])
            _ = try await server.pushOK(
                PushRequest(clientID: "phone-1", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(1))]),
                token: good
            )
            _ = try await server.send(.POST, "/v1/push", token: good, body: Data("{not json".utf8))
            _ = try await server.send(.GET, "/v1/pull?cursor=forged", token: good)
            _ = try await server.send(.GET, "/v1/health")
            requests += 5
            for failure in try await AuthTests.failures() {
                var headers: [(String, String)] = []
                if let header = failure.header {
                    headers.append(("Authorization", header))
                    tokens.append(String(header.dropFirst("Bearer ".count)))
                }
                #expect(try await server.send(.GET, "/v1/pull", headers: headers).status == 401)
                requests += 1
                refused += 1
            }
            let metrics = String(decoding: try await server.send(.GET, "/metrics").body, as: UTF8.self)
            requests += 1

            let lines = log.text
            for token in tokens where token.count > 8 {
                let signature = token.split(separator: ".").last.map(String.init) ?? token
                #expect(!lines.contains { $0.contains(token) || (signature.count > 16 && $0.contains(signature)) }, "a log line holds a token")
            }
            #expect(!lines.contains { $0.contains(TestServer.secret) }, "a log line holds the secret")
            let access = lines.filter { $0.contains("log=access") }
            #expect(access.count == requests, "one access line per request: \(access.count) for \(requests)")
            for field in ["method=", "route=", "status=", "ms=", "user=", "client=", "request_id="] {
                #expect(access.allSatisfy { $0.contains(field) }, "every access line has \(field)")
            }
            #expect(
                access.contains {
                    $0.contains("route=/v1/pull") && $0.contains("user=alice") && $0.contains("client=phone-1") && $0.contains("status=200")
                }
            )
            #expect(access.contains { $0.contains("route=/v1/push") && $0.contains("client=phone-1") && $0.contains("status=200") })
            #expect(access.filter { $0.contains("status=401") }.count == refused)
            for reason in [
                "missing_header", "not_bearer", "malformed", "wrong_algorithm", "bad_signature", "expired", "missing_expiry", "missing_subject",
            ] {
                #expect(metrics.contains("ferry_auth_failures_total{reason=\"\(reason)\"}"), "\(reason) counted")
            }
        }
    }
}
