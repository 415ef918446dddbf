import AsyncHTTPClient
import FerryProtocol
import FerryServer
import Foundation
import NIOCore

/// `ferry bench --only spaces`: what spaces cost (PROTOCOL.md, "Spaces"), against a `ferry serve`
/// child process: an empty pull for a user in 1,000 spaces beside one in a single space; a new
/// member's first download of a space of `records` beside a personal first pull of the same size;
/// two users pushing at once into two spaces, then into one.
struct SpacesBench {
    var database: DatabaseURL
    var records: Int
    /// Empty pulls timed for each user.
    var emptyPulls = 1000

    func run(in folder: URL) async throws -> [String] {
        let secret = TokenAuthority.randomSecret()
        let process = try ServerProcess(
            arguments: ["serve", "--database", database.description, "--port", "0", "--jwt-secret", secret, "--rate-limit", "off"],
            log: folder.appendingPathComponent("serve-spaces.log")
        )
        defer { process.stop() }
        let endpoint = "http://127.0.0.1:\(try await process.port())"
        let authority = try await TokenAuthority(secret: secret)
        let run = UUID().uuidString.prefix(6).lowercased()
        let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        defer { _ = http.shutdown() }
        let client = Client(endpoint: endpoint, http: http)
        let token: Tokens = { user, service in
            try await authority.issue(userID: "\(run)-\(user)", ttl: .seconds(7200), service: service)
        }
        let service = try await token("backend", true)
        var lines = ["spaces: on \(database)"]

        lines.append(try await emptyPulls(client, run: run, service: service, tokens: token))
        lines.append(try await crowdedFirstPull(client, run: run, service: service, tokens: token))
        lines.append(try await firstDownload(client, run: run, service: service, tokens: token))
        lines.append(try await concurrentWriters(client, run: run, service: service, tokens: token))
        return lines
    }

    /// A token for a user of this run (`true`: a service token).
    typealias Tokens = @Sendable (_ user: String, _ service: Bool) async throws -> String

    /// An empty pull, timed for a user in one space against one in 1,000.
    private func emptyPulls(_ client: Client, run: String, service: String, tokens: Tokens) async throws -> String {
        // An empty pull, one space against 1,000.
        let one = try await tokens("one", false)
        let many = try await tokens("many", false)
        try await client.send("PUT", Endpoint.spaces + "/\(run)-single", token: service)
        try await client.send("PUT", Endpoint.spaces + "/\(run)-single/members/\(run)-one", token: service, body: #"{"role":"read"}"#)
        for index in 0..<ProtocolLimits.maxSpacesPerUser {
            try await client.send("PUT", Endpoint.spaces + "/\(run)-s\(index)", token: service)
            try await client.send("PUT", Endpoint.spaces + "/\(run)-s\(index)/members/\(run)-many", token: service, body: #"{"role":"read"}"#)
        }
        var cursors: [String: String] = [:]
        for (name, token) in [("one", one), ("many", many)] { cursors[name] = try await client.pullAll(token: token).cursor }
        var latencies: [String: [Double]] = ["one": [], "many": []]
        for _ in 0..<emptyPulls {
            for (name, token) in [("one", one), ("many", many)] {
                let started = ContinuousClock.now
                let page = try await client.pull(token: token, cursor: cursors[name])
                latencies[name]!.append(started.duration(to: .now).seconds * 1000)
                guard page.changes.isEmpty else { throw CommandFailure("an empty pull brought \(page.changes.count) changes") }
            }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let (oneMedian, manyMedian) = (median(latencies["one"]!), median(latencies["many"]!))
        return String(
            format: "  empty pull, median of %d: 1 space %.2f ms, 1,000 spaces %.2f ms (%.1fx); cursor %d bytes against %d",
            emptyPulls,
            oneMedian,
            manyMedian,
            manyMedian / oneMedian,
            cursors["many"]!.utf8.count,
            cursors["one"]!.utf8.count
        )
    }

    /// A first pull of a user in 1,000 spaces of one record each.
    private func crowdedFirstPull(_ client: Client, run: String, service: String, tokens: Tokens) async throws -> String {
        // A first pull of a user in 1,000 spaces of one record each: one statement a space
        // would be a thousand round trips.
        let spread = (0..<ProtocolLimits.maxSpacesPerUser).map { index in
            Mutation(
                id: Int64(index + 1),
                entity: "items",
                entityID: "s\(index)",
                op: .upsert,
                data: ["value": .integer(Int64(index))],
                space: "\(run)-s\(index)"
            )
        }
        try await client.send(
            "POST",
            Endpoint.push,
            token: service,
            body: String(decoding: try JSONEncoder().encode(PushRequest(clientID: "bench-spread", mutations: spread)), as: UTF8.self)
        )
        let firstPullStarted = ContinuousClock.now
        let (_, crowded) = try await client.pullAll(token: try await tokens("many", false))
        guard crowded == ProtocolLimits.maxSpacesPerUser else { throw CommandFailure("the first pull of 1,000 spaces brought \(crowded) records") }
        return String(format: "  first pull of a user in 1,000 spaces of 1 record each: %.0f ms", firstPullStarted.duration(to: .now).seconds * 1000)
    }

    /// A first download: a space of `records` for a new member, the same size personal.
    private func firstDownload(_ client: Client, run: String, service: String, tokens: Tokens) async throws -> String {
        // A first download: a space of `records` for a new member, the same size personal.
        try await client.send("PUT", Endpoint.spaces + "/\(run)-big", token: service)
        try await client.push(count: records, space: "\(run)-big", token: service)
        try await client.send("PUT", Endpoint.spaces + "/\(run)-big/members/\(run)-joiner", token: service, body: #"{"role":"read"}"#)
        let solo = try await tokens("solo", false)
        try await client.push(count: records, space: nil, token: solo)
        var rates: [String: Double] = [:]
        for (name, token) in [("personal", solo), ("space", try await tokens("joiner", false))] {
            let started = ContinuousClock.now
            let (_, count) = try await client.pullAll(token: token)
            guard count == records else { throw CommandFailure("the \(name) first pull brought \(count) records, not \(records)") }
            rates[name] = Double(count) / started.duration(to: .now).seconds
        }
        return String(
            format: "  first download of %@ records: personal %.0f records/s, a space %.0f records/s (%.2fx)",
            records.formatted(),
            rates["personal"]!,
            rates["space"]!,
            rates["space"]! / rates["personal"]!
        )
    }

    /// Two users pushing at once: into a space each, then both into one.
    private func concurrentWriters(_ client: Client, run: String, service: String, tokens: Tokens) async throws -> String {
        // Two users pushing at once: into a space each, then both into one.
        for space in ["left", "right"] {
            try await client.send("PUT", Endpoint.spaces + "/\(run)-\(space)", token: service)
            for user in ["writer-a", "writer-b"] {
                try await client.send("PUT", Endpoint.spaces + "/\(run)-\(space)/members/\(run)-\(user)", token: service, body: #"{"role":"write"}"#)
            }
        }
        let writers = [try await tokens("writer-a", false), try await tokens("writer-b", false)]
        var seconds: [Double] = []
        for spaces in [["left", "right"], ["left", "left"]] {
            let started = ContinuousClock.now
            let round = "\(seconds.count)"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, token) in writers.enumerated() {
                    group.addTask {
                        try await client.push(count: 20_000, space: "\(run)-\(spaces[index])", token: token, batch: 100, prefix: round)
                    }
                }
                try await group.waitForAll()
            }
            seconds.append(started.duration(to: .now).seconds)
        }
        return String(
            format: "  two users, 200 pushes of 100 each at once: into two spaces %.2f s, into one space %.2f s",
            seconds[0],
            seconds[1]
        )
    }

    /// Requests of the benchmark, over AsyncHTTPClient.
    struct Client: Sendable {
        let endpoint: String
        let http: HTTPClient

        @discardableResult
        func send(_ method: String, _ path: String, token: String, body: String? = nil) async throws -> ByteBuffer {
            var request = HTTPClientRequest(url: endpoint + path)
            request.method = .RAW(value: method)
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(string: body))
            }
            let response = try await http.execute(request, timeout: .seconds(120))
            let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
            guard (200..<300).contains(Int(response.status.code)) else {
                throw CommandFailure("\(method) \(path) answered \(response.status.code): \(String(buffer: bytes))")
            }
            return bytes
        }

        func pull(token: String, cursor: String?) async throws -> PullResponse {
            let body = try await send("GET", Endpoint.pull + "?limit=1000" + (cursor.map { "&cursor=\($0)" } ?? ""), token: token)
            return try PullResponse.decode(from: Data(body.readableBytesView))
        }

        /// Pulls from scratch until caught up: the last cursor and how many changes came.
        func pullAll(token: String) async throws -> (cursor: String, count: Int) {
            var cursor: String?
            var count = 0
            while true {
                let page = try await pull(token: token, cursor: cursor)
                count += page.changes.count
                cursor = page.cursor
                if !page.hasMore { return (page.cursor, count) }
            }
        }

        /// Pushes `count` new records of about 100 bytes, `batch` to a request.
        func push(count: Int, space: String?, token: String, batch: Int = 1000, prefix: String = "r") async throws {
            for start in stride(from: 0, to: count, by: batch) {
                let mutations = (start..<min(start + batch, count)).map { index in
                    Mutation(
                        id: Int64(index + 1),
                        entity: "items",
                        entityID: "\(prefix)-\(index)",
                        op: .upsert,
                        data: [
                            "name": .string("item \(index)"), "value": .integer(Int64(index)), "note": .string(String(repeating: "x", count: 48)),
                        ],
                        space: space
                    )
                }
                let body = String(decoding: try JSONEncoder().encode(PushRequest(clientID: "bench-\(prefix)", mutations: mutations)), as: UTF8.self)
                try await send("POST", Endpoint.push, token: token, body: body)
            }
        }
    }
}
