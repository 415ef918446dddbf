import ConcurrencyExtras
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

@testable import Ferry

/// The frozen contract of every released client: the exchanges of a full life, recorded from
/// the client of protocol 1.0, replayed against today's server on both engines and decoded
/// with that client's frozen types (`Frozen1_0`). A server change that would break a released
/// client fails here. CONTRIBUTING, "The frozen contract", says how a release adds its own.
@Suite("The frozen contract of released clients", .timeLimit(.minutes(3)))
struct FrozenContractTests {
    /// One recorded exchange.
    struct Exchange: Codable {
        /// Whose token it carried.
        var user: String?
        var method: String
        /// Values an earlier answer gave (a cursor, an incarnation) as `{{k:path}}`: the string at
        /// `path` of answer `k` (`|url` percent-encoded as the client does in a query).
        var path: String
        var headers: [String: String]
        var body: String?
        var bodyBase64: String?
        /// Opened as a stream (the event stream, a download).
        var stream = false
        /// `minimum-protocol-1.1`: sent to a server that requires protocol 1.1.
        var policy: String?
        var status: Int
        /// A push answer's result statuses.
        var statuses: [String]?
    }

    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Contract/1.0/exchanges.json")

    /// Headers a 1.0 client never sent, and the token, which a replay signs anew.
    static let unrecorded: Set<String> = [
        "authorization", ProtocolHeaders.protocolVersion.lowercased(), ProtocolHeaders.appVersion.lowercased(),
        ProtocolHeaders.schemaVersion.lowercased(), ProtocolHeaders.platform.lowercased(),
    ]

    static func queryEncoded(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? value
    }

    /// Every string of at least 16 characters in a JSON answer, by path (`spaces.0.incarnation`).
    static func strings(in body: Data) -> [String: String] {
        guard let value = try? JSONSerialization.jsonObject(with: body) else { return [:] }
        var found: [String: String] = [:]
        func walk(_ value: Any, _ path: String) {
            switch value {
            case let object as [String: Any]: for (key, item) in object { walk(item, path.isEmpty ? key : "\(path).\(key)") }
            case let array as [Any]: for (index, item) in array.enumerated() { walk(item, "\(path).\(index)") }
            case let string as String where string.count >= 16: found[path] = string
            default: break
            }
        }
        walk(value, "")
        return found
    }

    // MARK: - Replay

    @Test("every exchange of the 1.0 client's life answers as recorded and decodes with its frozen types", arguments: StorageBackend.allCases)
    func replay(backend: StorageBackend) async throws {
        let data = try #require(try? Data(contentsOf: Self.fixture), "\(Self.fixture.path) is missing")
        let exchanges = try JSONDecoder().decode([Exchange].self, from: data)
        #expect(exchanges.count >= 25)
        try await TestServer.run(backend: backend) { server in
            try await Self.replay(exchanges.filter { $0.policy == nil }, on: server)
        }
        let policy = UpdatePolicy(protocolVersion: ProtocolVersion(major: 1, minor: 1))
        try await TestServer.run(backend: backend, updatePolicy: policy) { server in
            try await Self.replay(exchanges.filter { $0.policy == "minimum-protocol-1.1" }, on: server)
        }
    }

    static func replay(_ exchanges: [Exchange], on server: TestServer) async throws {
        var answers: [[String: String]] = []
        for (index, exchange) in exchanges.enumerated() {
            let path = substitute(exchange.path, answers)
            var token: String?
            if let user = exchange.user { token = try await TestServer.token(for: user) }
            if exchange.stream && path.hasPrefix(Endpoint.events) {
                let probe = try await EventStreamProbe.open(server.baseURL, token: token, client: exchange.headers["ferry-client-id"])
                #expect(try await probe.next() == .event("ready"), "exchange \(index): GET \(path)")
                answers.append([:])
                continue
            }
            let body = exchange.bodyBase64.flatMap { Data(base64Encoded: $0) } ?? exchange.body.map { Data(substitute($0, answers).utf8) }
            var headers = exchange.headers.map { ($0.key, $0.value) }
            if let token { headers.append(("Authorization", "Bearer \(token)")) }
            let reply = try await server.perform(.init(rawValue: exchange.method), path, headers: headers, body: body)
            #expect(
                reply.status == exchange.status,
                "exchange \(index): \(exchange.method) \(path): \(String(decoding: reply.body.prefix(300), as: UTF8.self))"
            )
            do {
                try Frozen1_0.decode(method: exchange.method, path: path, status: reply.status, body: reply.body)
            } catch {
                Issue.record("exchange \(index): \(exchange.method) \(path): the 1.0 client cannot decode the answer: \(error)")
            }
            if let statuses = exchange.statuses { #expect(Frozen1_0.statuses(reply.body) == statuses, "exchange \(index)") }
            answers.append(strings(in: reply.body))
        }
    }

    /// `text` with each `{{k:path}}` replaced by what answer `k` holds at `path`.
    static func substitute(_ text: String, _ answers: [[String: String]]) -> String {
        var result = text
        while let open = result.range(of: "{{"), let close = result.range(of: "}}", range: open.upperBound..<result.endIndex) {
            var key = String(result[open.upperBound..<close.lowerBound])
            let encoded = key.hasSuffix("|url")
            if encoded { key.removeLast(4) }
            let parts = key.split(separator: ":", maxSplits: 1).map(String.init)
            let value = Int(parts[0]).flatMap { $0 < answers.count ? answers[$0][parts[1]] : nil } ?? "missing-\(key)"
            result.replaceSubrange(open.lowerBound..<close.upperBound, with: encoded ? queryEncoded(value) : value)
        }
        return result
    }

    // MARK: - Recording

    /// Records the exchanges through a transport in front of the clients.
    final class Recorder: Sendable {
        let exchanges = LockIsolated<[Exchange]>([])
        let answers = LockIsolated<[[String: String]]>([])
        let policy = LockIsolated<String?>(nil)

        func transport(_ server: TestServer) -> InterceptingTransport {
            InterceptingTransport(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                send: { request, next in
                    let response = try await next(request)
                    self.add(request, status: response.status, body: response.body, stream: false)
                    return response
                },
                stream: { request, next in
                    let stream = try await next(request)
                    self.add(request, status: stream.status, body: Data(), stream: true)
                    return stream
                }
            )
        }

        func add(_ request: TransportRequest, status: Int, body: Data, stream: Bool) {
            let known = answers.value
            func placeholders(_ text: String) -> String {
                var text = text
                for (index, strings) in known.enumerated() {
                    for (path, value) in strings {
                        text = text.replacingOccurrences(of: FrozenContractTests.queryEncoded(value), with: "{{\(index):\(path)|url}}")
                        text = text.replacingOccurrences(of: value, with: "{{\(index):\(path)}}")
                    }
                }
                return text
            }
            let user = request.headers["Authorization"].flatMap { Self.subject(ofBearer: $0) }
            var exchange = Exchange(
                user: user,
                method: request.method,
                path: placeholders(request.path),
                headers: Dictionary(
                    request.headers.filter { !FrozenContractTests.unrecorded.contains($0.key.lowercased()) }.map { ($0.key.lowercased(), $0.value) },
                    uniquingKeysWith: { $1 }
                ),
                stream: stream,
                policy: policy.value,
                status: status
            )
            if let data = request.body {
                if let text = String(data: data, encoding: .utf8), (try? JSONSerialization.jsonObject(with: data)) != nil {
                    exchange.body = placeholders(text)
                } else {
                    exchange.bodyBase64 = data.base64EncodedString()
                }
            }
            if request.path.hasPrefix(Endpoint.push) { exchange.statuses = Frozen1_0.statuses(body) }
            exchanges.withValue { [exchange] in $0.append(exchange) }
            answers.withValue { $0.append(stream ? [:] : FrozenContractTests.strings(in: body)) }
        }

        static func subject(ofBearer header: String) -> String? {
            let parts = header.dropFirst("Bearer ".count).split(separator: ".")
            guard parts.count == 3 else { return nil }
            var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            guard let data = Data(base64Encoded: base64), let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                return nil
            }
            return claims["sub"] as? String
        }
    }

    /// A full life of two users on three devices: sign-in, pushes with every status a client
    /// can cause, pulls with spaces and a photo, the event stream, a resumable upload and a
    /// ranged download, a space's management, a dead letter, and an update-required answer.
    @Test("record the 1.0 contract (FERRY_RECORD_CONTRACT=1)", .enabled(if: ProcessInfo.processInfo.environment["FERRY_RECORD_CONTRACT"] == "1"))
    func record() async throws {
        let recorder = Recorder()
        try await TestServer.run { server in
            let transport = recorder.transport(server)
            let token = try await TestServer.token(for: "alice")
            _ = try await transport.send(TransportRequest(method: "GET", path: Endpoint.health))

            // Alice's phone: a job with a photo (a resumable upload), then a space she shares with Bob.
            let phone = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let alice = ClientFixture.client(
                store: phone,
                server: server,
                transport: transport,
                configuration: AttachmentSyncTests.configuration(chunk: 32 * 1024)
            )
            let (url, _) = try AttachmentSyncTests.photo(80_000, seed: 7)
            let digest = try await phone.attach(fileAt: url, contentType: "image/jpeg")
            try await AttachmentSyncTests.insertJob("j1", photo: digest, in: phone)
            try await alice.sync()
            _ = try await alice.createSpace("crew")
            _ = try await alice.setRole(.write, of: "bob", in: "crew")
            _ = try await alice.members(of: "crew")
            _ = try await alice.spaces()
            try await AttachmentSyncTests.insertJob("j2", photo: nil, team: "crew", in: phone)
            try await alice.sync()
            // A write to a space she is not in: rejected, a dead letter.
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, title, team) VALUES ('j3', 'nowhere', 'elsewhere')")
            }
            try await alice.sync()
            #expect(try await alice.deadLetters().count == 1)

            // The live stream opens.
            var events = TransportRequest(method: "GET", path: Endpoint.events, headers: ["Accept": "text/event-stream"])
            events.headers["Authorization"] = "Bearer \(token)"
            events.headers["Ferry-Client-ID"] = alice.store.clientID
            _ = try await transport.openStream(events)

            // Alice's tablet: pulls everything, downloads the photo by ranges.
            let tablet = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let second = ClientFixture.client(
                store: tablet,
                server: server,
                transport: transport,
                configuration: AttachmentSyncTests.configuration(chunk: 32 * 1024)
            )
            try await second.sync()
            _ = try await second.attachment(digest)

            // Bob: pulls the space, writes in it.
            let laptop = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let bob = ClientFixture.client(
                store: laptop,
                server: server,
                user: "bob",
                transport: transport,
                configuration: AttachmentSyncTests.configuration(chunk: 32 * 1024)
            )
            try await bob.sync()
            try await laptop.database.write { db in try db.execute(sql: "UPDATE jobs SET title = 'bob was here' WHERE id = 'j2'") }
            try await bob.sync()
            try await alice.sync()

            // What a client's own batches rarely show at once: merged, conflict, rejected.
            let raw = PushRequest(
                clientID: "raw-1",
                mutations: [
                    .upsert(id: 1, entity: "notes", entityID: "n1", data: ["body": .string("a")], naturalKey: "k1"),
                    .upsert(id: 2, entity: "notes", entityID: "n2", data: ["body": .string("b")], naturalKey: "k1"),
                    Mutation(id: 3, entity: "jobs", entityID: "j1", op: .upsert, data: ["title": .string("stale")], baseVersion: 99),
                    Mutation(id: 4, entity: "jobs", entityID: "j9", op: .upsert, data: ["title": .string("x")], space: "elsewhere"),
                ]
            )
            var push = TransportRequest(method: "POST", path: Endpoint.push, body: try JSONEncoder().encode(raw))
            push.headers = ["Authorization": "Bearer \(token)", "Content-Type": "application/json", "Ferry-Client-ID": "raw-1"]
            _ = try await transport.send(push)
            for client in [alice, second, bob] { await client.stop() }
            for store in [phone, tablet, laptop] { try await store.close() }
        }
        // A server requiring protocol 1.1 answers the 1.0 client 426.
        recorder.policy.setValue("minimum-protocol-1.1")
        try await TestServer.run(updatePolicy: UpdatePolicy(protocolVersion: ProtocolVersion(major: 1, minor: 1))) { server in
            var pull = TransportRequest(method: "GET", path: Endpoint.pull + "?limit=1000")
            pull.headers["Authorization"] = "Bearer \(try await TestServer.token(for: "alice"))"
            _ = try await recorder.transport(server).send(pull)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try FileManager.default.createDirectory(at: Self.fixture.deletingLastPathComponent(), withIntermediateDirectories: true)
        try encoder.encode(recorder.exchanges.value).write(to: Self.fixture)
    }
}
