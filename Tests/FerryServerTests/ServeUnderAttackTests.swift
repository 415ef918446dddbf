import AsyncHTTPClient
import FerryProtocol
import FerryTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// A real `ferry serve` process under hostile traffic: it answers every attack with a 4xx,
/// stays up, and its memory stays bounded (read from /proc, so this runs on Linux).
@Suite("ferry serve under attack", .timeLimit(.minutes(3)))
struct ServeUnderAttackTests {
    /// Resident memory of a process, in MiB.
    static func residentMiB(of pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { throw TestFailure("no VmRSS for \(pid)") }
        return kilobytes / 1024
    }

    static func send(_ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], body: HTTPClientRequest.Body? = nil) async -> Int? {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = body }
        guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(30)) else { return nil }
        _ = try? await response.body.collect(upTo: 1 << 20)
        return Int(response.status.code)
    }

    @Test("bodies held open just short of complete are bounded for the whole process: past --body-memory the next is 503, and its bytes come back")
    func bodiesInFlightAreBoundedForTheProcess() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let directory = TestDirectory.make("body-memory")
        let server = try FerryProcess(
            [
                "serve", "--database", "sqlite:\(directory.appendingPathComponent("server.sqlite").path)", "--port", "0", "--jwt-secret",
                TestServer.secret, "--body-memory", "6", "--body-timeout", "5", "--rate-limit", "off",
            ],
            in: directory
        )
        defer { server.process.terminate() }
        let port = try await server.listeningPort()
        // Two users, each within every limit of their own, each holding a body half a megabyte short of complete.
        var held: [HostileClientTests.RawConnection] = []
        for user in ["ann", "ben"] {
            let connection = try await HostileClientTests.offThread { try HostileClientTests.RawConnection(port: port) }
            let token = try await TestServer.token(for: user)
            // Sent from a thread of its own, not awaited: a server that stops reading may leave it blocked.
            DispatchQueue.global().async {
                connection.send(
                    "POST /v1/push HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(token)\r\nContent-Type: application/json\r\n"
                        + "Content-Length: 4000000\r\n\r\n" + String(repeating: " ", count: 3_500_000)
                )
            }
            held.append(connection)
        }
        let answers = await withTaskGroup(of: String.self) { group in
            for connection in held { group.addTask { String((await connection.closed() ?? "none").prefix(12)) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        // 6 MiB hold one such body, not two: the second is refused at once, the first times out.
        #expect(answers.sorted() == ["HTTP/1.1 408", "HTTP/1.1 503"], "\(answers)")
        let push = try JSONEncoder().encode(
            PushRequest(clientID: "phone", mutations: [Mutation(id: 1, entity: "notes", entityID: "n1", op: .upsert, data: ["x": .integer(1)])])
        )
        let status = await Self.send(
            "http://127.0.0.1:\(port)/v1/push",
            method: .POST,
            headers: [("Authorization", "Bearer \(try await TestServer.token(for: "cat"))"), ("Content-Type", "application/json")],
            body: .bytes(ByteBuffer(bytes: push))
        )
        #expect(status == 200, "the bytes of both came back")
    }

    @Test("2,000 forged tokens, 40 streamed bodies over 4 MiB, 200 bodies nested 100,000 deep: every answer a 4xx, the server up, memory bounded")
    func floods() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let directory = TestDirectory.make("attack")
        let server = try FerryProcess(
            [
                "serve", "--database", "sqlite:\(directory.appendingPathComponent("server.sqlite").path)", "--port", "0", "--jwt-secret",
                TestServer.secret,
            ],
            in: directory
        )
        defer { server.process.terminate() }
        let base = "http://127.0.0.1:\(try await server.listeningPort())"
        let token = try await TestServer.token(for: "alice")
        let authorized = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
        for _ in 0..<20 { _ = await Self.send(base + "/v1/pull", headers: authorized) }
        let before = try Self.residentMiB(of: server.process.processIdentifier)

        let forged = try await TestServer.token(for: "alice", secret: String(repeating: "f", count: 40))
        var statuses: [Int?] = []
        statuses += await withTaskGroup(of: [Int?].self) { group in
            for _ in 0..<20 {
                group.addTask {
                    var statuses: [Int?] = []
                    for _ in 0..<100 { statuses.append(await Self.send(base + "/v1/pull", headers: [("Authorization", "Bearer \(forged)")])) }
                    return statuses
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(statuses.allSatisfy { $0 == 401 }, "forged tokens: \(Set(statuses.map { $0.map(String.init) ?? "no answer" }))")

        let chunk = ByteBuffer(repeating: UInt8(ascii: " "), count: 256 * 1024)
        var oversized: [Int?] = []
        for _ in 0..<40 {
            let chunks = AsyncStream<ByteBuffer> { continuation in
                for _ in 0..<24 { continuation.yield(chunk) }  // 6 MiB, no Content-Length
                continuation.finish()
            }
            oversized.append(await Self.send(base + "/v1/push", method: .POST, headers: authorized, body: .stream(chunks, length: .unknown)))
        }
        // The server may close the connection before the upload ends; it never accepts the body.
        #expect(oversized.allSatisfy { $0 == nil || $0 == 413 }, "\(oversized)")

        let deep =
            #"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":"x","op":"upsert","data":{"v":"#
            + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}}]}"
        var nested: [Int?] = []
        for _ in 0..<200 {
            nested.append(await Self.send(base + "/v1/push", method: .POST, headers: authorized, body: .bytes(ByteBuffer(string: deep))))
        }
        #expect(nested.allSatisfy { $0 == 400 }, "\(Set(nested.map { $0.map(String.init) ?? "no answer" }))")

        #expect(await Self.send(base + "/v1/pull", headers: authorized) == 200, "the server still serves")
        let after = try Self.residentMiB(of: server.process.processIdentifier)
        print("ferry serve resident memory: \(before) MiB before the attacks, \(after) MiB after")
        #expect(after - before < 96, "resident memory grew from \(before) MiB to \(after) MiB")
    }
}
