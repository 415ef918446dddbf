import ArgumentParser
import FerryServer
import Foundation
import Hummingbird
import Logging

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the reference sync server (PROTOCOL.md) until SIGINT or SIGTERM."
    )

    @Option(
        help: """
            Where records live: sqlite:PATH, sqlite::memory:, or postgres://USER:PASSWORD@HOST:PORT/DATABASE \
            (password also from PGPASSWORD; add ?sslmode=require or ?sslmode=verify-full for TLS).
            """
    )
    var database = "sqlite:ferry-server.sqlite"

    @Option(help: "Most connections this process opens to PostgreSQL (1 to 1000); several processes share the server's max_connections.")
    var poolSize: Int?

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port = 8080

    @Option(help: "HS256 secret for tokens; falls back to FERRY_JWT_SECRET, else one is generated for this run.")
    var jwtSecret: String?

    @Option(help: "Requests per user per window, as N/SECONDS, or off.")
    var rateLimit = "300/60"

    @Option(help: "Seconds a connection may stay idle, or take to send a request's head, before it is closed.")
    var idleTimeout = 30

    @Option(help: "Seconds a request's body may take to arrive once its head has; a slower one is answered 408 and closed.")
    var bodyTimeout = 30

    @Option(help: "Requests of one user this process works on at once (1 to 1000); the next is answered 429 before its body is read.")
    var maxRequestsPerUser = 4

    @Option(
        help: "Days tombstones and idle clients are kept (1 to 3650), purged every hour; older cursors get cursor_expired. Or off."
    )
    var retentionDays = "30"

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .info
            return handler
        }
        guard (0...65_535).contains(port) else {
            throw CommandFailure("--port must be from 0 to 65535, got \(port)")
        }
        guard (1...3600).contains(idleTimeout) else {
            throw CommandFailure("--idle-timeout must be from 1 to 3600 seconds, got \(idleTimeout)")
        }
        guard (1...3600).contains(bodyTimeout) else {
            throw CommandFailure("--body-timeout must be from 1 to 3600 seconds, got \(bodyTimeout)")
        }
        let retention: Duration?
        switch retentionDays {
        case "off": retention = nil
        case let text:
            guard let days = Int(text), (1...3650).contains(days) else {
                throw CommandFailure("--retention-days must be a whole number of days from 1 to 3650, or off; got '\(text)'")
            }
            retention = .seconds(days * 86_400)
        }
        guard (1...1000).contains(maxRequestsPerUser) else {
            throw CommandFailure("--max-requests-per-user must be from 1 to 1000, got \(maxRequestsPerUser)")
        }
        let policy: RateLimitPolicy?
        do {
            policy = try RateLimitPolicy.parse(rateLimit)
        } catch {
            throw CommandFailure("--rate-limit: \(error)")
        }
        let location: DatabaseURL
        do {
            location = try DatabaseURL(parsing: database)
        } catch {
            throw CommandFailure("--database \(error)")
        }
        let storage: any SyncStorage
        var rateLimiter: (any RateLimiter)?
        switch location {
        case .sqlite(let path):
            guard poolSize == nil else {
                throw CommandFailure("--pool-size applies to a postgres:// database; SQLite has one writer and needs no pool")
            }
            do {
                storage = try SQLiteSyncStorage(path: path)
            } catch {
                throw CommandFailure("--database \(location): \(error)")
            }
        case .postgres(let postgres):
            let poolSize = self.poolSize ?? 10
            guard (1...1000).contains(poolSize) else { throw CommandFailure("--pool-size must be from 1 to 1000, got \(poolSize)") }
            let postgresStorage: PostgresSyncStorage
            do {
                postgresStorage = try await PostgresSyncStorage.connect(to: postgres, poolSize: poolSize, logger: Logger(label: "ferry.postgres"))
            } catch {
                throw CommandFailure("--database \(location): \(error)")
            }
            storage = postgresStorage
            // Quotas in the database: every process behind the load balancer draws on the same one.
            rateLimiter = policy.map { postgresStorage.rateLimiter(policy: $0) }
        }

        let (secret, demoToken) = try await resolveSecret()
        let configuration = ServerConfiguration(
            host: host,
            port: port,
            jwtSecret: secret,
            rateLimit: policy,
            idleTimeout: .seconds(idleTimeout),
            bodyTimeout: .seconds(bodyTimeout),
            maxRequestsPerUser: maxRequestsPerUser,
            retention: retention
        )
        let host = self.host
        let app = try await FerryServerApplication.make(
            configuration: configuration,
            storage: storage,
            rateLimiter: rateLimiter,
            onServerRunning: { port in
                printNow("Ferry server listening on http://\(host):\(port) (database \(location), rate limit \(policy?.description ?? "off"))")
                if let demoToken {
                    printNow("No --jwt-secret or FERRY_JWT_SECRET: generated a secret for this run.")
                    printNow("Token for user 'demo' (valid 24 h):\n\(demoToken)")
                }
            }
        )
        do {
            try await app.runService()
        } catch {
            throw CommandFailure("cannot serve on \(host):\(port): \(error)")
        }
    }
}

extension ServeCommand {
    /// The configured secret, or a generated one with a token for the `demo` user.
    private func resolveSecret() async throws -> (secret: String, demoToken: String?) {
        if let secret = jwtSecret ?? ProcessInfo.processInfo.environment["FERRY_JWT_SECRET"] {
            do {
                _ = try await TokenAuthority(secret: secret)
            } catch {
                throw CommandFailure("--jwt-secret / FERRY_JWT_SECRET: \(error)")
            }
            return (secret, nil)
        }
        let generated = TokenAuthority.randomSecret()
        return (generated, try await TokenAuthority(secret: generated).issue(userID: "demo", ttl: .seconds(86_400)))
    }
}
