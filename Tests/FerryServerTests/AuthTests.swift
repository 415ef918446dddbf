import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

@Suite("Authentication", .timeLimit(.minutes(1)))
struct AuthTests {
    /// Every failure PROTOCOL.md lists, each with the words its message must contain.
    static func failures() async throws -> [(name: String, header: String?, mentions: String)] {
        let now = Int(Date().timeIntervalSince1970)
        let valid = try await TestServer.token(for: "alice")
        return [
            ("missing header", nil, "missing Authorization"),
            ("not bearer", "Basic YWxpY2U6c2VjcmV0", "Bearer"),
            ("malformed", "Bearer not-a-jwt", "malformed"),
            ("garbage claims", "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS256"], claims: ["sub": 5, "exp": "soon"])), "malformed"),
            ("wrong signature", "Bearer " + (try await TestServer.token(for: "alice", secret: String(repeating: "w", count: 40))), "signature"),
            ("tampered payload", "Bearer " + tamper(valid), "signature"),
            (
                "alg none",
                "Bearer "
                    + (try TestServer.handMadeToken(
                        header: ["alg": "none", "typ": "JWT"],
                        claims: ["sub": "alice", "exp": now + 600],
                        signature: false
                    )), "HS256 only"
            ),
            (
                "another algorithm",
                "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS512", "typ": "JWT"], claims: ["sub": "alice", "exp": now + 600])),
                "HS256 only"
            ),
            ("expired", "Bearer " + (try await TestServer.token(for: "alice", now: Date().addingTimeInterval(-7200), ttl: .seconds(60))), "expired"),
            ("no exp", "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS256", "typ": "JWT"], claims: ["sub": "alice"])), "exp"),
            ("no sub", "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS256", "typ": "JWT"], claims: ["exp": now + 600])), "sub"),
            (
                "crit naming an extension",
                "Bearer "
                    + (try TestServer.handMadeToken(
                        header: ["alg": "HS256", "typ": "JWT", "crit": ["http://example.com/must-check"], "http://example.com/must-check": true],
                        claims: ["sub": "alice", "exp": now + 600]
                    )), "crit"
            ),
            (
                "crit that is not a list",
                "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS256", "crit": "b64"], claims: ["sub": "alice", "exp": now + 600])),
                "crit"
            ),
            (
                "empty sub",
                "Bearer " + (try TestServer.handMadeToken(header: ["alg": "HS256", "typ": "JWT"], claims: ["sub": "", "exp": now + 600])), "sub"
            ),
        ]
    }

    static func tamper(_ token: String) -> String {
        var parts = token.split(separator: ".").map(String.init)
        let claims = ["sub": "mallory", "exp": Int(Date().timeIntervalSince1970) + 600] as [String: Any]
        parts[1] = (try? JSONSerialization.data(withJSONObject: claims).base64URLEncodedString()) ?? parts[1]
        return parts.joined(separator: ".")
    }

    @Test("every auth failure answers 401 with a message saying which, never echoes the token, and writes nothing")
    func failuresAnswer401() async throws {
        try await RouterServer.run(rateLimit: .default) { server in
            let batch = try JSONEncoder().encode(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(1))])
            )
            for failure in try await Self.failures() {
                let headers = failure.header.map { [("Authorization", $0)] } ?? []
                for (method, path, body) in [("POST", "/v1/push", Optional(batch)), ("GET", "/v1/pull", nil)] {
                    let reply = try await server.send(method == "POST" ? .POST : .GET, path, headers: headers, body: body)
                    #expect(reply.status == 401, "\(failure.name) on \(path)")
                    #expect(reply.errorCode == "unauthorized", "\(failure.name)")
                    #expect(reply.errorMessage?.contains(failure.mentions) == true, "\(failure.name): \(reply.errorMessage ?? "")")
                    if let header = failure.header, let token = header.split(separator: " ").last, token.count > 12 {
                        #expect(reply.errorMessage?.contains(token) == false)
                    }
                    #expect(reply.headers["RateLimit-Limit"].isEmpty, "unauthenticated responses carry no quota")
                }
            }
            let alice = try await TestServer.token(for: "alice")
            #expect(try await server.pullAll(token: alice).isEmpty)
            // The client's position did not move either.
            let first = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(1))]),
                token: alice
            )
            #expect(first.results.first?.status == .applied)
        }
    }

    @Test("health needs no token")
    func healthIsOpen() async throws {
        try await RouterServer.run { server in
            let reply = try await server.send(.GET, "/v1/health")
            #expect(reply.status == 200)
            #expect(try reply.decode(HealthResponse.self).status == "ok")
        }
    }

    @Test("a secret shorter than 32 bytes is refused up front")
    func shortSecret() async throws {
        await #expect(throws: TokenSecretTooShort.self) { _ = try await TokenAuthority(secret: "short") }
    }
}
