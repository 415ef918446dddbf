import ArgumentParser
import FerryProtocol
import FerryServer
import Foundation
import Hummingbird
import Logging

/// `ferry serve` and `ferry-server`: the reference server until SIGINT or SIGTERM. One command
/// for both executables, so the one deployed and the one the README runs take the same flags.
public struct ServeCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
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
        help: "MiB of request bodies this process holds at once, all users together (4 to 65536); a body that would pass it is answered 503."
    )
    var bodyMemory = 256

    @Option(
        help: "Days tombstones and idle clients are kept (1 to 3650), purged every hour; older cursors get cursor_expired. Or off."
    )
    var retentionDays = "30"

    /// Every option checked before anything starts (exit 64, with the usage).
    @Option(
        help: """
            Where attachments' bytes live: file:FOLDER (by default FOLDER is the SQLite database's path with .attachments; \
            with PostgreSQL or an in-memory database, attachments are off unless given), \
            s3://BUCKET?endpoint=URL&region=REGION (keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for several processes \
            on one PostgreSQL database), or off.
            """
    )
    var attachments: String?

    @Option(help: "The largest attachment taken, in bytes (1 to 1 TiB); a larger one is answered 413 before its bytes are read.")
    var maxAttachmentBytes: Int64 = 5 * 1024 * 1024 * 1024

    @Option(help: "The most bytes one user's uploaded attachments may hold; past it an upload is answered 507 quota_exceeded. No limit by default.")
    var attachmentQuota: Int64?

    @Option(help: "The most uploads in progress one user may have at once (1 to 10000); past it a new one is answered 507 quota_exceeded.")
    var maxOpenUploads = ServerConfiguration.defaultMaxOpenUploads

    @Option(help: "The least protocol version served, like 1.1; an older client is answered 426 update_required.")
    var minimumProtocol: String?

    @Option(
        help: """
            The least app version served, like 2.3.0, or PLATFORM=VERSION (ios=2.3.0) for one platform; repeat for several. \
            An app below it, or one that does not say its version, is answered 426 update_required; \
            an app that names no platform must meet every platform's.
            """
    )
    var minimumAppVersion: [String] = []

    @Option(help: "The least schema version of the app served; an app below it, or one that does not say, is answered 426 update_required.")
    var minimumSchemaVersion: Int?

    @Option(help: "What an app below a minimum shows its user (by default a sentence naming what is too old).")
    var updateMessage: String?

    public init() {}

    public func validate() throws {
        _ = try updatePolicy()
        guard (1...(1 << 40)).contains(maxAttachmentBytes) else {
            throw ValidationError("--max-attachment-bytes must be from 1 to 1099511627776, got \(maxAttachmentBytes)")
        }
        guard (1...10_000).contains(maxOpenUploads) else {
            throw ValidationError("--max-open-uploads must be from 1 to 10000, got \(maxOpenUploads)")
        }
        if let attachmentQuota, attachmentQuota < 0 {
            throw ValidationError("--attachment-quota must be a number of bytes, 0 or more, got \(attachmentQuota)")
        }
        if let attachments {
            do {
                _ = try BlobStoreURL(parsing: attachments)
            } catch {
                throw ValidationError("--attachments \(error)")
            }
        }
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be from 0 to 65535, got \(port)") }
        guard (1...3600).contains(idleTimeout) else {
            throw ValidationError("--idle-timeout must be from 1 to 3600 seconds, got \(idleTimeout)")
        }
        guard (1...3600).contains(bodyTimeout) else {
            throw ValidationError("--body-timeout must be from 1 to 3600 seconds, got \(bodyTimeout)")
        }
        _ = try retention()
        guard (4...65_536).contains(bodyMemory) else { throw ValidationError("--body-memory must be from 4 to 65536 MiB, got \(bodyMemory)") }
        guard (1...1000).contains(maxRequestsPerUser) else {
            throw ValidationError("--max-requests-per-user must be from 1 to 1000, got \(maxRequestsPerUser)")
        }
        _ = try rateLimitPolicy()
        if let secret = configuredSecret {
            do { try TokenAuthority.check(secret: secret) } catch { throw ValidationError("--jwt-secret / FERRY_JWT_SECRET: \(error)") }
        }
        switch try databaseURL() {
        case .sqlite:
            guard poolSize == nil else {
                throw ValidationError("--pool-size applies to a postgres:// database; SQLite has one writer and needs no pool")
            }
        case .postgres:
            if let poolSize, !(1...1000).contains(poolSize) { throw ValidationError("--pool-size must be from 1 to 1000, got \(poolSize)") }
        }
    }

    /// `--minimum-protocol`, `--minimum-app-version`, `--minimum-schema-version` and `--update-message`.
    private func updatePolicy() throws -> UpdatePolicy {
        var policy = UpdatePolicy(schemaVersion: minimumSchemaVersion, message: updateMessage)
        if let minimumProtocol {
            guard let version = ProtocolVersion(minimumProtocol), version.major == ProtocolVersion.current.major, version <= .current else {
                throw ValidationError(
                    "--minimum-protocol must be a version this server speaks, from \(ProtocolVersion.first) to \(ProtocolVersion.current); got '\(minimumProtocol)'"
                )
            }
            policy.protocolVersion = version
        }
        for entry in minimumAppVersion {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            let platform = parts.count == 2 ? ProtocolHeaders.platformName(String(parts[0])) : nil
            guard let version = VersionNumber(parts[parts.count - 1]), parts.count == 1 || platform != nil else {
                throw ValidationError(
                    "--minimum-app-version must be a version like 2.3.0, or PLATFORM=VERSION like ios=2.3.0 (platform: lowercase letters, digits, '-'); got '\(entry)'"
                )
            }
            if let platform { policy.appVersionByPlatform[platform] = version } else { policy.appVersion = version }
        }
        if let minimumSchemaVersion, !ProtocolHeaders.schemaVersions.contains(minimumSchemaVersion) {
            throw ValidationError(
                "--minimum-schema-version must be a whole number from 0 to \(ProtocolHeaders.schemaVersions.upperBound), got \(minimumSchemaVersion)"
            )
        }
        if let updateMessage, updateMessage.isEmpty || updateMessage.utf8.count > 1000 {
            throw ValidationError("--update-message must be 1 to 1000 bytes of text")
        }
        return policy
    }

    /// `--jwt-secret`, else `FERRY_JWT_SECRET`; `nil` when neither is set (a secret is generated).
    private var configuredSecret: String? { jwtSecret ?? ProcessInfo.processInfo.environment["FERRY_JWT_SECRET"] }

    /// `--retention-days`: `nil` for `off`.
    private func retention() throws -> Duration? {
        guard retentionDays != "off" else { return nil }
        guard let days = Int(retentionDays), (1...3650).contains(days) else {
            throw ValidationError("--retention-days must be a whole number of days from 1 to 3650, or off; got '\(retentionDays)'")
        }
        return .seconds(days * 86_400)
    }

    private func rateLimitPolicy() throws -> RateLimitPolicy? {
        do {
            return try RateLimitPolicy.parse(rateLimit)
        } catch {
            throw ValidationError("--rate-limit: \(error)")
        }
    }

    /// Where attachments live: as given, else beside a SQLite file (off in memory, and with
    /// PostgreSQL, whose processes need a store they share: say which).
    private func attachmentStore(for location: DatabaseURL) throws -> BlobStoreURL {
        if let attachments { return try BlobStoreURL(parsing: attachments) }
        guard case .sqlite(let path?) = location else { return .off }
        return .file(folder: path + ".attachments")
    }

    private func databaseURL() throws -> DatabaseURL {
        do {
            return try DatabaseURL(parsing: database)
        } catch {
            throw ValidationError("--database \(error)")
        }
    }

    public func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .info
            return handler
        }
        let retention = try retention()
        let policy = try rateLimitPolicy()
        let location = try databaseURL()
        let storage: any SyncStorage
        var rateLimiter: (any RateLimiter)?
        switch location {
        case .sqlite(let path):
            do {
                storage = try SQLiteSyncStorage(path: path)
            } catch {
                throw CommandFailure("--database \(location): \(error)")
            }
        case .postgres(let postgres):
            let poolSize = self.poolSize ?? 10
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
        var configuration = ServerConfiguration(
            host: host,
            port: port,
            jwtSecret: secret,
            rateLimit: policy,
            idleTimeout: .seconds(idleTimeout),
            bodyTimeout: .seconds(bodyTimeout),
            maxRequestsPerUser: maxRequestsPerUser,
            retention: retention
        )
        configuration.maxBodyBytesInFlight = bodyMemory * 1024 * 1024
        configuration.maxAttachmentBytes = maxAttachmentBytes
        configuration.attachmentQuota = attachmentQuota
        configuration.maxOpenUploads = maxOpenUploads
        configuration.updatePolicy = try updatePolicy()
        let store = try attachmentStore(for: location)
        do {
            configuration.attachments = try await store.open()
        } catch {
            throw CommandFailure("--attachments \(attachments ?? "(beside the database)"): \(error)")
        }
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
        if let secret = configuredSecret { return (secret, nil) }  // checked by validate()
        let generated = TokenAuthority.randomSecret()
        return (generated, try await TokenAuthority(secret: generated).issue(userID: "demo", ttl: .seconds(86_400)))
    }
}
