import Ferry
import FerryProtocol
import FerryServer
import Foundation
import Logging
import ServiceLifecycle

/// A `ferry serve` inside the demo: SQLite in the demo's directory, a free loopback port,
/// the real application with its auth and rate limiter.
struct DemoServer: Sendable {
    let baseURL: URL
    private let authority: TokenAuthority
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// Starts a server on `storage`, or on a new SQLite file in `directory` without one.
    static func start(
        in directory: URL, rateLimit: RateLimitPolicy?, rateLimiter: (any RateLimiter)? = nil, storage: (any SyncStorage)? = nil
    ) async throws -> DemoServer {
        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let storage = try storage ?? SQLiteSyncStorage(path: directory.appendingPathComponent("server.sqlite").path)
        var logger = Logger(label: "ferry.demo.server")
        logger.logLevel = .error
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        let app = try await FerryServerApplication.make(
            configuration: ServerConfiguration(host: "127.0.0.1", port: 0, jwtSecret: secret, rateLimit: rateLimit),
            storage: storage, rateLimiter: rateLimiter, logger: logger, onServerRunning: { port in portContinuation.yield(port) }
        )
        let group = ServiceGroup(services: [app], logger: logger)
        let running = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            running.cancel()
            throw CommandFailure("the demo server did not start")
        }
        return DemoServer(
            baseURL: URL(string: "http://127.0.0.1:\(port)")!, authority: try await TokenAuthority(secret: secret),
            group: group, running: running
        )
    }

    /// Runs `body` against a server started for it, and stops the server however `body` ends.
    static func with<T: Sendable>(
        in directory: URL, rateLimit: RateLimitPolicy?, rateLimiter: (any RateLimiter)? = nil, storage: (any SyncStorage)? = nil,
        _ body: (DemoServer) async throws -> T
    ) async throws -> T {
        let server = try await start(in: directory, rateLimit: rateLimit, rateLimiter: rateLimiter, storage: storage)
        do {
            let result = try await body(server)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }

    func token(for user: String) async throws -> String {
        try await authority.issue(userID: user, ttl: .seconds(3600))
    }

    /// Lets in-flight requests finish, then closes the database.
    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
    }

    /// Another device of `user` pushes these records, so the app finds them on the server.
    func seed(user: String, client: String, mutations: [Mutation]) async throws {
        let transport = URLSessionTransport(baseURL: baseURL)
        let token = try await token(for: user)
        for start in stride(from: 0, to: mutations.count, by: 1000) {
            let batch = PushRequest(clientID: client, mutations: Array(mutations[start..<min(start + 1000, mutations.count)]))
            let response = try await transport.send(TransportRequest(
                method: "POST", path: "/v1/push", headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                body: try JSONEncoder().encode(batch)
            ))
            guard response.status == 200 else { throw CommandFailure("seeding the demo server answered \(response.status)") }
        }
    }

    /// Everything the server holds for `user`, by `entity/entityID`: what the demo checks its verdicts against.
    func records(of user: String) async throws -> [String: Change] {
        let transport = URLSessionTransport(baseURL: baseURL)
        let token = try await token(for: user)
        var records: [String: Change] = [:]
        var cursor: String?
        while true {
            let query = "limit=1000" + (cursor.map { "&cursor=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0)" } ?? "")
            let response = try await transport.send(TransportRequest(method: "GET", path: "/v1/pull?" + query, headers: ["Authorization": "Bearer \(token)"]))
            guard response.status == 200 else { throw CommandFailure("reading the demo server answered \(response.status)") }
            let page = try JSONDecoder().decode(PullResponse.self, from: response.body)
            for change in page.changes { records["\(change.entity)/\(change.entityID)"] = change }
            cursor = page.cursor
            if !page.hasMore { return records }
        }
    }
}
