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

/// Clients that attack the server rather than sync with it: the server answers each with a
/// clear 4xx or closes it, and keeps answering everyone else.
@Suite("Hostile clients", .timeLimit(.minutes(1)))
struct HostileClientTests {
    /// A raw TCP connection to the test server, to misbehave below HTTP.
    final class RawConnection: Sendable {
        let socket: Int32

        init(port: Int) throws {
            socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw TestFailure("cannot connect to port \(port)") }
            var limit = timeval(tv_sec: 20, tv_usec: 0)  // a guard against hanging the test, not a measurement
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(socket) }

        /// Makes the close at `deinit` a reset (RST) rather than an orderly FIN.
        func reset() {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(socket, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        }

        func send(_ text: String) { _ = text.withCString { Glibc.send(socket, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }

        /// `readUntilClosed()` on a dispatch queue: a blocked Swift concurrency thread could be
        /// one the server in this process needs to answer.
        func closed() async -> String? {
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: self.readUntilClosed()) }
            }
        }

        /// Reads until the server closes the connection; what it said, or nil if it never closed.
        func readUntilClosed() -> String? {
            var received = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(socket, &buffer, buffer.count, 0)
                if count == 0 { return String(decoding: received, as: UTF8.self) }
                if count < 0 { return errno == ECONNRESET ? String(decoding: received, as: UTF8.self) : nil }
                received += buffer[0..<count]
            }
        }
    }

    /// Runs blocking socket work on a thread of its own: a connect or a send that blocks must
    /// never hold one of the few Swift concurrency threads the servers in this process need.
    static func offThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }

    static func port(of server: TestServer) -> Int { Int(server.baseURL.split(separator: ":").last!)! }

    @Test("connections that send nothing, or a request head that never completes, are closed at the idle timeout while others are answered")
    func slowClients() async throws {
        try await TestServer.run(idleTimeout: .milliseconds(300)) { server in
            let port = Self.port(of: server)
            let silent = try (0..<20).map { _ in try RawConnection(port: port) }
            let trickling = try RawConnection(port: port)
            trickling.send("GET /v1/hea")
            // Others are answered meanwhile: each sends its whole request the moment it connects
            // (a pooled HTTP client may take longer than the timeout to send on a busy machine).
            func healthy() async throws -> Bool {
                let other = try RawConnection(port: port)
                other.send("GET /v1/health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                return await other.closed()?.hasPrefix("HTTP/1.1 200") == true
            }
            #expect(try await healthy(), "the server answers others meanwhile")
            for connection in silent + [trickling] {
                #expect(await connection.closed() == "", "closed without an answer")
            }
            #expect(try await healthy())
        }
    }

    @Test("bodies just over every limit are refused clearly, and one record over a limit does not stop its batch")
    func justOverLimits() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let tooMany = PushRequest(
                clientID: "c",
                mutations: (1...1001).map { .upsert(id: Int64($0), entity: "e", entityID: "\($0)", data: .value(1)) }
            )
            let reply = try await server.push(tooMany, token: token)
            #expect(reply.status == 413)
            #expect(reply.errorCode == "batch_too_large")
            let announced = try await server.send(.POST, "/v1/push", token: token, body: Data(count: ProtocolLimits.maxPushBodyBytes + 1))
            #expect(announced.status == 413)
            #expect(try await server.push(PushRequest(clientID: String(repeating: "c", count: 65), mutations: []), token: token).status == 400)

            let bigData = String(repeating: "x", count: ProtocolLimits.maxDataBytes)
            let answer = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        .upsert(id: 1, entity: "e", entityID: "big", data: ["v": .string(bigData)]),
                        .upsert(id: 2, entity: "e", entityID: String(repeating: "i", count: ProtocolLimits.maxEntityIDLength + 1), data: .value(1)),
                        .upsert(
                            id: 3,
                            entity: "e",
                            entityID: "k",
                            data: .value(1),
                            naturalKey: String(repeating: "k", count: ProtocolLimits.maxNaturalKeyLength + 1)
                        ),
                        .upsert(id: 4, entity: "e", entityID: "fine", data: .value(1)),
                    ]
                ),
                token: token
            )
            #expect(answer.results.map(\.status) == [.rejected, .rejected, .rejected, .applied])
            #expect(answer.results.prefix(3).allSatisfy { $0.error?.isEmpty == false })
        }
    }

    @Test("deep nesting and invalid UTF-8 are answered 400, saying what is wrong")
    func deepNestingAndInvalidUTF8() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let deep =
                #"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":"x","op":"upsert","data":{"v":"#
                + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}}]}"
            let nested = try await server.send(.POST, "/v1/push", token: token, body: Data(deep.utf8))
            #expect(nested.status == 400)
            #expect(nested.errorMessage?.contains("nest") == true, "\(nested.errorMessage ?? "")")
            var invalid = Data(#"{"clientID":"c","mutations":[{"id":1,"entity":"e","entityID":"x","op":"upsert","data":{"v":""#.utf8)
            invalid += Data([0xC3, 0x28, 0xFF])
            invalid += Data(#""}}]}"#.utf8)
            let garbled = try await server.send(.POST, "/v1/push", token: token, body: invalid)
            #expect(garbled.status == 400)
            #expect(garbled.errorMessage?.contains("UTF-8") == true, "\(garbled.errorMessage ?? "")")
            #expect(try await server.pullAll(token: token).isEmpty)
        }
    }

    @Test("a flood of bad tokens is answered 401 each, counted, and the server still serves real users")
    func badTokenFlood() async throws {
        let metrics = ServerMetrics()
        try await TestServer.run(rateLimit: .default, metrics: metrics) { server in
            let forged = try await TestServer.token(for: "alice", secret: String(repeating: "f", count: 40))
            let statuses = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<20 {
                    group.addTask { try await (0..<50).asyncMap { _ in try await server.pull(token: forged).status } }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(statuses.count == 1000)
            #expect(statuses.allSatisfy { $0 == 401 })
            #expect(try await server.pull(token: try await TestServer.token(for: "alice")).status == 200)
            let exposition = String(decoding: try await server.send(.GET, "/metrics").body, as: UTF8.self)
            #expect(
                exposition.contains("ferry_auth_failures_total{reason=\"bad_signature\"} 1000"),
                "\(exposition.split(separator: "\n").filter { $0.contains("auth") })"
            )
        }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
