import AsyncHTTPClient
import FerryProtocol
import FerryServer
import Foundation
import NIOCore

/// `ferry bench --only load`: several `ferry serve` processes on one database, as behind a
/// load balancer, and concurrent clients each alternating a push of a batch and a pull,
/// sent round-robin across the processes, for a fixed count of requests.
struct LoadTest {
    var database: DatabaseURL
    var servers: Int
    var clients: Int
    var requests: Int
    var batchSize = 50
    /// Clients of one user: the devices of a user share their records and their lock.
    var devicesPerUser = 5
    /// Spaces the clients share, every user a writer of each, client `n` pushing into space
    /// `n % spaces` (PROTOCOL.md, "Spaces"); 0: every push is personal.
    var spaces = 0

    struct Report: Sendable {
        var seconds: Double
        var requests: Int
        var mutations: Int
        var errors: Int
        var firstError: String?
        /// Milliseconds per request, sorted.
        var latencies: [Double]
        /// Resident memory of each server process, in MiB: started, halfway, at the end.
        var memory: [(start: Double, halfway: Double, end: Double)]

        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
        }
    }

    func run(in folder: URL) async throws -> Report {
        let secret = TokenAuthority.randomSecret()
        // A quota no client reaches: the limiter (shared in the database on PostgreSQL) runs on every request.
        let processes = try (0..<servers).map { index in
            try ServerProcess(
                arguments: ["serve", "--database", database.description, "--port", "0", "--jwt-secret", secret, "--rate-limit", "1000000/60"],
                log: folder.appendingPathComponent("serve-\(index).log")
            )
        }
        defer { for process in processes { process.stop() } }
        var ports: [Int] = []
        for process in processes { ports.append(try await process.port()) }
        let endpoints = ports.map { "http://127.0.0.1:\($0)" }
        let start = processes.map(\.residentMB)

        let authority = try await TokenAuthority(secret: secret)
        let run = "\(UUID().uuidString.prefix(8))"
        var tokens: [String] = []
        for user in 0..<max(1, clients / devicesPerUser) {
            tokens.append(try await authority.issue(userID: "load-\(run)-\(user)", ttl: .seconds(3600)))
        }

        let http = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup,
            configuration: .init(connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: clients))
        )
        if spaces > 0 {
            let service = try await authority.issue(userID: "load-\(run)-backend", ttl: .seconds(3600), service: true)
            for space in 0..<spaces {
                try await Self.send("PUT", endpoints[0] + Endpoint.spaces + "/load-\(run.lowercased())-\(space)", token: service, http: http)
                for user in tokens.indices {
                    try await Self.send(
                        "PUT",
                        endpoints[0] + Endpoint.spaces + "/load-\(run.lowercased())-\(space)/members/load-\(run)-\(user)",
                        token: service,
                        body: #"{"role":"write"}"#,
                        http: http
                    )
                }
            }
        }
        let tickets = Tickets(total: requests, halfway: { processes.map(\.residentMB) })
        let began = ContinuousClock.now
        let outcomes = await withTaskGroup(of: ClientOutcome.self) { group in
            for client in 0..<clients {
                let device = Device(
                    clientID: "load-\(run)-\(client)",
                    token: tokens[client / devicesPerUser % tokens.count],
                    batchSize: batchSize,
                    http: http,
                    space: spaces > 0 ? "load-\(run.lowercased())-\(client % spaces)" : nil
                )
                group.addTask { await device.run(tickets: tickets, endpoints: endpoints) }
            }
            return await group.reduce(into: [ClientOutcome]()) { $0.append($1) }
        }
        let elapsed = began.duration(to: .now)
        try await http.shutdown()
        let halfway = await tickets.halfwayMemory ?? start
        let end = processes.map(\.residentMB)
        return Report(
            seconds: elapsed.seconds,
            requests: outcomes.reduce(0) { $0 + $1.latencies.count },
            mutations: outcomes.reduce(0) { $0 + $1.mutations },
            errors: outcomes.reduce(0) { $0 + $1.errors },
            firstError: outcomes.lazy.compactMap(\.firstError).first,
            latencies: outcomes.flatMap(\.latencies).sorted(),
            memory: (0..<servers).map { (start[$0], halfway[$0], end[$0]) }
        )
    }

    /// One management request; anything but a success stops the test.
    private static func send(_ method: String, _ url: String, token: String, body: String? = nil, http: HTTPClient) async throws {
        var request = HTTPClientRequest(url: url)
        request.method = .RAW(value: method)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await http.execute(request, timeout: .seconds(30))
        guard (200..<300).contains(Int(response.status.code)) else { throw CommandFailure("\(method) \(url) answered \(response.status.code)") }
    }

    struct ClientOutcome: Sendable {
        var latencies: [Double] = []
        var mutations = 0
        var errors = 0
        var firstError: String?
    }

    /// Hands out the fixed count of requests, and samples the servers' memory halfway.
    actor Tickets {
        private var issued = 0
        let total: Int
        private let halfway: @Sendable () -> [Double]
        private(set) var halfwayMemory: [Double]?

        init(total: Int, halfway: @escaping @Sendable () -> [Double]) {
            self.total = total
            self.halfway = halfway
        }

        /// The next request's number, or `nil` once all are handed out.
        func next() -> Int? {
            guard issued < total else { return nil }
            issued += 1
            if issued == total / 2 { halfwayMemory = halfway() }
            return issued
        }
    }

    /// One client: pushes a batch of new and changed records, then pulls what changed, again
    /// and again, each request to the next process in turn.
    struct Device: Sendable {
        let clientID: String
        let token: String
        let batchSize: Int
        let http: HTTPClient
        /// The space this client's records live in; `nil`: personal.
        var space: String?

        func run(tickets: Tickets, endpoints: [String]) async -> ClientOutcome {
            var outcome = ClientOutcome()
            var nextID: Int64 = 1
            var cursor: String?
            var pushNext = true
            while let ticket = await tickets.next() {
                var request: HTTPClientRequest
                let endpoint = endpoints[ticket % endpoints.count]
                if pushNext {
                    let mutations = (0..<batchSize).map { _ in
                        defer { nextID += 1 }
                        // A record is written four times on average: creates and updates.
                        return Mutation(
                            id: nextID,
                            entity: "samples",
                            entityID: "\(clientID)-\(nextID % Int64(batchSize * 4 + 1))",
                            op: .upsert,
                            data: ["value": .integer(nextID), "kind": .string("steps")],
                            space: space
                        )
                    }
                    request = HTTPClientRequest(url: endpoint + Endpoint.push)
                    request.method = .POST
                    request.headers.add(name: "Content-Type", value: "application/json")
                    request.body = .bytes(
                        ByteBuffer(bytes: (try? JSONEncoder().encode(PushRequest(clientID: clientID, mutations: mutations))) ?? Data())
                    )
                } else {
                    let query = "limit=500" + (cursor.map { "&cursor=\($0)" } ?? "")
                    request = HTTPClientRequest(url: endpoint + Endpoint.pull + "?" + query)
                }
                request.headers.add(name: "Authorization", value: "Bearer \(token)")
                let started = ContinuousClock.now
                do {
                    let response = try await http.execute(request, timeout: .seconds(60))
                    let body = try await response.body.collect(upTo: 64 * 1024 * 1024)
                    let elapsed = started.duration(to: .now)
                    outcome.latencies.append(elapsed.seconds * 1000)
                    guard response.status == .ok else {
                        outcome.errors += 1
                        outcome.firstError = outcome.firstError ?? "\(response.status.code): \(String(buffer: body))"
                        continue
                    }
                    if pushNext {
                        outcome.mutations += batchSize
                    } else if let page = try? JSONDecoder().decode(PullResponse.self, from: Data(body.readableBytesView)) {
                        cursor = page.cursor
                    }
                } catch {
                    outcome.errors += 1
                    outcome.firstError = outcome.firstError ?? "\(error)"
                }
                pushNext.toggle()
            }
            return outcome
        }
    }
}
