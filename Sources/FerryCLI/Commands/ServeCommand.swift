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

    @Option(help: "Where records live: sqlite:PATH or sqlite::memory:.")
    var database = "sqlite:ferry-server.sqlite"

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
        let policy: RateLimitPolicy?
        do {
            policy = try RateLimitPolicy.parse(rateLimit)
        } catch {
            throw CommandFailure("--rate-limit: \(error)")
        }
        let location = try DatabaseLocation(parsing: database)
        let storage: SQLiteSyncStorage
        do {
            storage = try SQLiteSyncStorage(path: location.path)
        } catch {
            throw CommandFailure("--database \(database): \(error)")
        }

        let (secret, demoToken) = try await resolveSecret()
        let configuration = ServerConfiguration(
            host: host, port: port, jwtSecret: secret, rateLimit: policy, idleTimeout: .seconds(idleTimeout)
        )
        let host = self.host
        let database = self.database
        let app = try await FerryServerApplication.make(
            configuration: configuration, storage: storage,
            onServerRunning: { port in
                printNow("Ferry server listening on http://\(host):\(port) (database \(database), rate limit \(policy?.description ?? "off"))")
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
        let generated = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        return (generated, try await TokenAuthority(secret: generated).issue(userID: "demo", ttl: .seconds(86_400)))
    }
}

/// A `--database` URL.
struct DatabaseLocation {
    /// SQLite file path; `nil` for an in-memory database.
    var path: String?

    init(parsing url: String) throws {
        if url == "sqlite::memory:" {
            path = nil
        } else if url.hasPrefix("sqlite:"), url.count > "sqlite:".count {
            path = String(url.dropFirst("sqlite:".count))
        } else {
            throw CommandFailure(
                "--database '\(url)' is not supported; use sqlite:PATH (for example sqlite:ferry-server.sqlite) or sqlite::memory:"
            )
        }
    }
}
