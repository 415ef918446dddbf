import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import NIOHTTP1
import Testing

/// PROTOCOL.md, "Versions": what a server says it can do, and who it refuses.
@Suite("Protocol versions and update required")
struct VersionTests {
    static let policy = UpdatePolicy(
        protocolVersion: ProtocolVersion(major: 1, minor: 1),
        appVersion: VersionNumber("2.0"),
        appVersionByPlatform: ["ios": VersionNumber("2.3.0")!],
        schemaVersion: 4
    )

    static func headers(
        protocol version: String? = "1.1",
        app: String? = "2.0",
        schema: String? = "4",
        platform: String? = "android"
    ) -> [(String, String)] {
        [
            version.map { (ProtocolHeaders.protocolVersion, $0) }, app.map { (ProtocolHeaders.appVersion, $0) },
            schema.map { (ProtocolHeaders.schemaVersion, $0) }, platform.map { (ProtocolHeaders.platform, $0) },
        ].compactMap { $0 }
    }

    @Test("health says the protocol versions, the features and the minimum, to anyone, whatever they announce")
    func capabilities() async throws {
        try await TestServer.run(updatePolicy: Self.policy) { server in
            let reply = try await server.send(.GET, "/v1/health", headers: Self.headers(protocol: "1.0", app: nil, schema: nil))
            #expect(reply.status == 200)
            let health = try reply.decode(HealthResponse.self)
            #expect(health.protocol == .init(min: "1.0", max: ProtocolVersion.current.description))
            #expect(Set(health.features ?? []) == ["spaces", "live", "attachments", "update_required", "large_pages", "held_attachments"])
            #expect(health.minimum == UpdateRequirement(protocol: "1.1", appVersion: "2.0", schemaVersion: 4, appVersionByPlatform: ["ios": "2.3.0"]))
        }
        try await TestServer.run { server in
            let health = try await server.send(.GET, "/v1/health").decode(HealthResponse.self)
            #expect(health.minimum == nil)
        }
    }

    @Test(
        "a client below any minimum is answered 426 update_required with what it lacks, on every endpoint; without a token, 401 first",
        arguments: [
            (headers(protocol: nil), UpdateRequirement(protocol: "1.1")),
            (headers(protocol: "1.0"), UpdateRequirement(protocol: "1.1")),
            (headers(app: "1.9.9"), UpdateRequirement(appVersion: "2.0")),
            (headers(app: nil), UpdateRequirement(appVersion: "2.0")),
            (headers(app: "2.2", platform: "ios"), UpdateRequirement(appVersion: "2.3.0")),
            // A client that names no platform may be on any: it must meet each one's minimum.
            (headers(app: "2.2", platform: nil), UpdateRequirement(appVersion: "2.3.0")),
            (headers(schema: "3"), UpdateRequirement(schemaVersion: 4)),
            (headers(schema: nil), UpdateRequirement(schemaVersion: 4)),
            (headers(protocol: "1.0", app: "1.0", schema: "0"), UpdateRequirement(protocol: "1.1", appVersion: "2.0", schemaVersion: 4)),
        ]
    )
    func refused(headers: [(String, String)], minimum: UpdateRequirement) async throws {
        try await TestServer.run(updatePolicy: Self.policy) { server in
            let token = try await TestServer.token(for: "alice")
            for (method, path, sendToken) in [
                (NIOHTTP1.HTTPMethod.GET, "/v1/pull", true), (.POST, "/v1/push", true), (.GET, "/v1/events", true), (.GET, "/v1/spaces", true),
                (.GET, "/v1/pull", false),
            ] {
                let body = method == .POST ? try JSONEncoder().encode(PushRequest(clientID: "c", mutations: [])) : nil
                let reply = try await server.send(method, path, token: sendToken ? token : nil, headers: headers, body: body)
                guard sendToken else {
                    #expect(reply.status == 401)
                    continue
                }
                #expect(reply.status == 426, "\(method) \(path)")
                #expect(reply.errorCode == "update_required")
                #expect(try reply.decode(ErrorEnvelope.self).error.minimum == minimum)
                #expect(reply.errorMessage?.contains("update") == true)
            }
            // Nothing of the refused push was kept.
            let pull = try await server.send(.GET, "/v1/pull", token: token, headers: Self.headers())
            #expect(try pull.decode(PullResponse.self).changes.isEmpty)
        }
    }

    @Test(
        "a client at or above every minimum is served; a higher minor version too; another platform takes the general minimum, no platform the highest; a service always"
    )
    func served() async throws {
        try await TestServer.run(updatePolicy: Self.policy) { server in
            let token = try await TestServer.token(for: "alice")
            for headers in [
                Self.headers(), Self.headers(protocol: "1.7", app: "2.0.0.0", schema: "12"), Self.headers(app: "2.3", platform: "ios"),
                Self.headers(app: "2.0", platform: "android"), Self.headers(app: "2.3", platform: nil),
            ] {
                let reply = try await server.send(.GET, "/v1/pull", token: token, headers: headers)
                #expect(reply.status == 200, "\(headers)")
            }
            // A service (the app's backend, `ferry space`) is no app to update.
            let service = try await TestServer.token(for: "backend", service: true)
            #expect(try await server.send(.GET, "/v1/spaces", token: service).status == 200)
        }
    }

    @Test(
        "a malformed version header is a 400 that names it, with or without a minimum",
        arguments: [
            (ProtocolHeaders.protocolVersion, "1"), (ProtocolHeaders.protocolVersion, "one.two"), (ProtocolHeaders.protocolVersion, "2.0"),
            (ProtocolHeaders.appVersion, "2.x"), (ProtocolHeaders.appVersion, "1.2.3.4.5"), (ProtocolHeaders.appVersion, ""),
            (ProtocolHeaders.schemaVersion, "-1"), (ProtocolHeaders.schemaVersion, "+4"), (ProtocolHeaders.platform, "iOS"),
            (ProtocolHeaders.platform, String(repeating: "a", count: 33)),
        ]
    )
    func malformed(name: String, value: String) async throws {
        for policy in [UpdatePolicy(), Self.policy] {
            try await TestServer.run(updatePolicy: policy) { server in
                let token = try await TestServer.token(for: "alice")
                let reply = try await server.send(.GET, "/v1/pull", token: token, headers: [(name, value)])
                #expect(reply.status == 400)
                #expect(reply.errorCode == "bad_request")
                #expect(reply.errorMessage?.contains(name) == true || reply.errorMessage?.contains("speaks") == true, "\(reply.errorMessage ?? "")")
            }
        }
    }

    @Test("versions compare number by number")
    func versionOrder() {
        #expect(VersionNumber("2.10")! > VersionNumber("2.9")!)
        #expect(VersionNumber("2.1") == VersionNumber("2.1.0"))
        #expect(VersionNumber("2.1.0.1")! > VersionNumber("2.1")!)
        #expect(VersionNumber("01.2")?.description == "1.2")
        #expect(VersionNumber("1..2") == nil)
        #expect(ProtocolVersion("1.10")! > ProtocolVersion("1.9")!)
        #expect(ProtocolVersion("1") == nil)
    }
}
