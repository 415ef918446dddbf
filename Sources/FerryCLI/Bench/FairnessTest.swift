import AsyncHTTPClient
import FerryProtocol
import FerryServer
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// `ferry bench --only fairness`: one user attacks a `ferry serve` with its default limits (24
/// concurrent pushes of 3.75 MB bodies and 30 concurrent pulls of 4 MiB pages, without pause)
/// while another user pushes one mutation at a time. Reports the other user's push latency idle
/// and under attack, what the attacker's requests were answered, and the server's memory.
struct FairnessTest {
    var database: DatabaseURL
    /// Single-mutation pushes of the other user, idle and again under attack.
    /// 140 twice stays within the default quota of 300 a minute.
    var probes = 140
    var attackingPushes = 24
    var attackingPulls = 30
    /// Whether the attacker waits `Retry-After` after a 429, as a client that paces itself does,
    /// or sends its next request at once.
    var honorsRetryAfter = false

    struct Report: Sendable {
        /// The other user's push latencies in milliseconds, sorted: with the server idle, and under attack.
        var idle: [Double]
        var underAttack: [Double]
        /// The attacker's answers by status.
        var attackStatuses: [Int: Int]
        /// The server's resident memory in MiB: before the attack, its peak during it (sampled every 50 ms), after it.
        var memoryBefore: Double
        var memoryPeak: Double
        var memoryAfter: Double

        static func percentile(_ p: Double, of sorted: [Double]) -> Double {
            sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        }
    }

    func run(in folder: URL) async throws -> Report {
        let secret = TokenAuthority.randomSecret()
        let server = try ServerProcess(
            arguments: ["serve", "--database", database.description, "--port", "0", "--jwt-secret", secret],
            log: folder.appendingPathComponent("serve-fairness.log")
        )
        defer { server.stop() }
        let endpoint = "http://127.0.0.1:\(try await server.port())"
        let authority = try await TokenAuthority(secret: secret)
        let run = "\(UUID().uuidString.prefix(8))"
        let attacker = try await authority.issue(userID: "attacker-\(run)", ttl: .seconds(3600))
        let victim = try await authority.issue(userID: "victim-\(run)", ttl: .seconds(3600))
        let http = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup,
            configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 128))
        )
        do {
            let report = try await attack(Client(http: http, endpoint: endpoint), attacker: attacker, victim: victim, server: server)
            try await http.shutdown()
            return report
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    private func attack(_ client: Client, attacker: String, victim: String, server: ServerProcess) async throws -> Report {

        // The attacker's 60 MB to pull: 16 pushes of 15 records of 250 KiB, one at a time. Bodies
        // are written as text, not encoded: this process must not spend the cores the server needs.
        let large = String(repeating: "x", count: 250 * 1024)
        func largeBatch(_ first: Int64) -> ByteBuffer {
            let mutations = (first..<first + 15).map { id in
                #"{"id":\#(id),"entity":"docs","entityID":"doc-\#(id % 240)","op":"upsert","data":{"body":"\#(large)"}}"#
            }
            return ByteBuffer(string: #"{"clientID":"attacker","mutations":["# + mutations.joined(separator: ",") + "]}")
        }
        var nextID: Int64 = 1
        for _ in 0..<16 {
            _ = try await client.send(.push(largeBatch(nextID)), token: attacker)
            nextID += 15
        }

        let idle = try await probe(client, token: victim, clientID: "victim-idle")
        let before = server.residentMB
        let (underAttack, statuses, peak) = try await withThrowingTaskGroup(of: [Int].self) { group in
            let done = Flag()
            for index in 0..<attackingPushes {
                group.addTask {
                    var statuses: [Int] = []
                    var id = Int64(1_000_000 * (index + 1))
                    while !done.isSet {
                        statuses.append(try await pause(after: await client.send(.push(largeBatch(id)), token: attacker)))
                        id += 15
                    }
                    return statuses
                }
            }
            for _ in 0..<attackingPulls {
                group.addTask {
                    var statuses: [Int] = []
                    while !done.isSet { statuses.append(try await pause(after: await client.send(.pull, token: attacker))) }
                    return statuses
                }
            }
            let sampling = Task {
                var peak = server.residentMB
                while !Task.isCancelled {
                    peak = max(peak, server.residentMB)
                    try? await Task.sleep(for: .milliseconds(50))
                }
                return peak
            }
            let latencies = try await probe(client, token: victim, clientID: "victim-attacked")
            done.set()
            sampling.cancel()
            var statuses: [Int: Int] = [:]
            for try await answers in group { for status in answers { statuses[status, default: 0] += 1 } }
            return (latencies, statuses, await sampling.value)
        }
        return Report(
            idle: idle,
            underAttack: underAttack,
            attackStatuses: statuses,
            memoryBefore: before,
            memoryPeak: peak,
            memoryAfter: server.residentMB
        )
    }

    /// An attacker's answer's status (0 for none); after a 429 it waits a second first if it honors `Retry-After`.
    private func pause(after send: @autoclosure () async throws -> Int) async throws -> Int {
        let status = (try? await send()) ?? 0
        if status == 429 && honorsRetryAfter { try await Task.sleep(for: .seconds(1)) }
        return status
    }

    /// `probes` single-mutation pushes one after another; their latencies in ms, sorted. A push
    /// not answered 200 fails the benchmark: the other user must be served.
    private func probe(_ client: Client, token: String, clientID: String) async throws -> [Double] {
        var latencies: [Double] = []
        for id in 1...Int64(probes) {
            let started = ContinuousClock.now
            let push = PushRequest(
                clientID: clientID,
                mutations: [.upsert(id: id, entity: "notes", entityID: "n-\(id % 20)", data: ["value": .integer(id)])]
            )
            let status = try await client.send(.push(ByteBuffer(bytes: try JSONEncoder().encode(push))), token: token)
            guard status == 200 else { throw CommandFailure("the other user's push was answered \(status) during the fairness benchmark") }
            latencies.append(started.duration(to: .now).seconds * 1000)
        }
        return latencies.sorted()
    }

    /// Set once, read by every attacking task.
    final class Flag: Sendable {
        private let value = NIOLockedValueBox(false)
        var isSet: Bool { value.withLockedValue { $0 } }
        func set() { value.withLockedValue { $0 = true } }
    }

    struct Client: Sendable {
        enum Call {
            case push(ByteBuffer)
            case pull
        }
        let http: HTTPClient
        let endpoint: String

        /// Sends one request and reads its whole answer; its status.
        func send(_ call: Call, token: String) async throws -> Int {
            var request: HTTPClientRequest
            switch call {
            case .push(let push):
                request = HTTPClientRequest(url: endpoint + Endpoint.push)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(push)
            case .pull:
                request = HTTPClientRequest(url: endpoint + Endpoint.pull + "?limit=1000")
            }
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await http.execute(request, timeout: .seconds(120))
            _ = try await response.body.collect(upTo: 64 * 1024 * 1024)
            return Int(response.status.code)
        }
    }
}
