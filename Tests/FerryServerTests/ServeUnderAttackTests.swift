import AsyncHTTPClient
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
