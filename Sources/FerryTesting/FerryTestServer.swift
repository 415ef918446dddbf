import Ferry
import FerryProtocol
import FerryServer
import Foundation
import Logging
import ServiceLifecycle

/// A real Ferry server in this process, on a free loopback port: the reference server's
/// routes, auth and rate limiting on real storage (an in-memory SQLite database unless given
/// another), for tests of an app's sync code and for demonstrations.
///
/// ```swift
/// try await FerryTestServer.run { server in
///     let client = FerryClient(store: store, transport: server.transport(), token: server.tokenProvider(for: "alice"))
///     try await client.sync()
/// }
/// ```
public struct FerryTestServer: Sendable {
    /// Where the server answers, like `http://127.0.0.1:49152`.
    public let baseURL: URL
    /// The server's storage, for checking what it holds directly.
    public let storage: any SyncStorage
    /// Where the server keeps attachments' bytes, for checking what it holds directly.
    public let attachments: any BlobStore
    private let authority: TokenAuthority
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// Starts a server. Stop it with ``stop()``, or use ``run(storage:secret:rateLimit:rateLimiter:metrics:logger:idleTimeout:live:attachmentQuota:attachments:updatePolicy:rules:sideEffects:_:)``,
    /// which stops it however the test ends.
    ///
    /// - Parameters:
    ///   - storage: The server's storage, closed when the server stops; an in-memory SQLite database when `nil`.
    ///   - secret: The HS256 secret tokens are signed with; a random one when `nil`.
    ///   - rateLimit: The per-user request budget; `nil` (the default here) serves without limits.
    ///   - rateLimiter: A limiter to use instead of the in-process one `rateLimit` makes (one on a test clock, or PostgreSQL's).
    ///   - metrics: Where the server's Prometheus metrics go.
    ///   - logger: The server's logger; errors only when `nil`.
    ///   - idleTimeout: How long a connection may stay idle before the server closes it.
    ///   - live: The event streams' limits and pacing.
    ///   - attachmentQuota: The most bytes one user's uploaded attachments may hold; `nil`: no limit.
    ///   - attachments: Where attachments' bytes live; `nil`: a temporary folder.
    ///   - updatePolicy: The least client versions served (`426 update_required` below them); none by default.
    ///   - rules: The app's rules over writes; none by default.
    ///   - sideEffects: Carries out the side effects the rules ask for; `nil`: they wait in the database.
    public static func start(
        storage: (any SyncStorage)? = nil,
        secret: String? = nil,
        rateLimit: RateLimitPolicy? = nil,
        rateLimiter: (any RateLimiter)? = nil,
        metrics: ServerMetrics = ServerMetrics(),
        logger: Logger? = nil,
        idleTimeout: Duration = .seconds(30),
        live: LiveChanges.Configuration = LiveChanges.Configuration(),
        attachmentQuota: Int64? = nil,
        attachments: (any BlobStore)? = nil,
        updatePolicy: UpdatePolicy = UpdatePolicy(),
        rules: ServerRules = ServerRules(),
        sideEffects: (any SideEffectHandler)? = nil
    ) async throws -> FerryTestServer {
        let secret = secret ?? TokenAuthority.randomSecret()
        let storage = try storage ?? SQLiteSyncStorage(path: nil)
        let logger = logger ?? Self.errorsOnly
        // The one check that can fail before the server owns the storage (which it closes when it stops).
        let authority: TokenAuthority
        do {
            authority = try await TokenAuthority(secret: secret)
        } catch {
            try? await storage.close()
            throw error
        }
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        // Attachments in a folder of their own unless given, as `ferry serve` keeps them beside its database.
        let attachments =
            if let attachments { attachments } else {
                try await FileBlobStore(
                    folder: FileManager.default.temporaryDirectory.appendingPathComponent("ferry-test-attachments-\(UUID().uuidString)").path
                )
            }
        let app = try await FerryServerApplication.make(
            // Devices of one user in a test may send many requests at once: no cap on them here.
            configuration: {
                var configuration = ServerConfiguration(
                    host: "127.0.0.1",
                    port: 0,
                    jwtSecret: secret,
                    rateLimit: rateLimit,
                    idleTimeout: idleTimeout,
                    maxRequestsPerUser: 100_000
                )
                configuration.live = live
                configuration.attachments = attachments
                configuration.attachmentQuota = attachmentQuota
                configuration.updatePolicy = updatePolicy
                configuration.rules = rules
                configuration.sideEffects = sideEffects
                return configuration
            }(),
            storage: storage,
            rateLimiter: rateLimiter,
            metrics: metrics,
            logger: logger,
            onServerRunning: { port in portContinuation.yield(port) }
        )
        let group = ServiceGroup(services: [app], logger: logger)
        let running = Task {
            defer { portContinuation.finish() }
            try await group.run()
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            let why = await running.result.failure.map { ": \($0)" } ?? ""
            throw FerryTestServerFailure("the test server did not start\(why)")
        }
        return FerryTestServer(
            baseURL: URL(string: "http://127.0.0.1:\(port)")!,
            storage: storage,
            attachments: attachments,
            authority: authority,
            group: group,
            running: running
        )
    }

    /// The server's logger when a test gives none: errors only.
    private static var errorsOnly: Logger {
        var logger = Logger(label: "ferry.test-server")
        logger.logLevel = .error
        return logger
    }

    /// Runs `body` against a server started for it, and stops the server however `body` ends.
    /// The parameters are those of ``start(storage:secret:rateLimit:rateLimiter:metrics:logger:idleTimeout:live:attachmentQuota:attachments:updatePolicy:rules:sideEffects:)``.
    public static func run<T: Sendable>(
        storage: (any SyncStorage)? = nil,
        secret: String? = nil,
        rateLimit: RateLimitPolicy? = nil,
        rateLimiter: (any RateLimiter)? = nil,
        metrics: ServerMetrics = ServerMetrics(),
        logger: Logger? = nil,
        idleTimeout: Duration = .seconds(30),
        live: LiveChanges.Configuration = LiveChanges.Configuration(),
        attachmentQuota: Int64? = nil,
        attachments: (any BlobStore)? = nil,
        updatePolicy: UpdatePolicy = UpdatePolicy(),
        rules: ServerRules = ServerRules(),
        sideEffects: (any SideEffectHandler)? = nil,
        _ body: (FerryTestServer) async throws -> T
    ) async throws -> T {
        let server = try await start(
            storage: storage,
            secret: secret,
            rateLimit: rateLimit,
            rateLimiter: rateLimiter,
            metrics: metrics,
            logger: logger,
            idleTimeout: idleTimeout,
            live: live,
            attachmentQuota: attachmentQuota,
            attachments: attachments,
            updatePolicy: updatePolicy,
            rules: rules,
            sideEffects: sideEffects
        )
        do {
            let result = try await body(server)
            try await server.stop()
            return result
        } catch {
            try? await server.stop()
            throw error
        }
    }

    /// Lets in-flight requests finish, then closes the storage. Throws what stopped the server
    /// early, if anything did.
    public func stop() async throws {
        await group.triggerGracefulShutdown()
        try await running.value
    }

    /// Runs the server's hourly attachment sweep as if it were `date`: a day or more ahead, it
    /// forgets uploads no record references and deletes the bytes nobody may read, as a server
    /// does a day later. Returns how many attachments' bytes went.
    @discardableResult
    public func sweepAttachments(asOf date: Date) async -> Int {
        await AttachmentJanitor(storage: storage, blobs: attachments, logger: Logger(label: "ferry.test-server.janitor")).sweepOnce(now: date)
    }

    /// Every attachment the server knows, by digest: who uploaded it, which records reference it
    /// (released ones still readable for a day), and the bytes its store holds under the digest
    /// (`bytesStored`, `nil` once purged). What a test of photos checks the server's side against.
    public func storedAttachments() async throws -> [StoredAttachment] {
        var listed = try await storage.storedAttachments()
        for index in listed.indices { listed[index].bytesStored = try await attachments.size(of: listed[index].digest) }
        return listed
    }

    /// A signed token for `user`, valid for `ttl`; with `service`, a service token (`ferry_admin`).
    public func token(for user: String, ttl: Duration = .seconds(3600), service: Bool = false) async throws -> String {
        try await authority.issue(userID: user, ttl: ttl, service: service)
    }

    /// A token provider for a `FerryClient` signed in as `user`.
    public func tokenProvider(for user: String) -> TokenProvider {
        { try await self.token(for: user) }
    }

    /// A transport to this server over loopback HTTP, as an app's client would use.
    public func transport() -> URLSessionTransport {
        URLSessionTransport(baseURL: baseURL)
    }

    /// Pushes `mutations` as another device of `user` would (`client` is that device's id),
    /// so that a client under test finds them on the server.
    /// With `service`, it pushes as an app's backend with a service token (into any space).
    public func seed(user: String, client: String = "seed-device", mutations: [Mutation], service: Bool = false) async throws {
        let transport = transport()
        let token = try await token(for: user, service: service)
        for start in stride(from: 0, to: mutations.count, by: ProtocolLimits.maxMutationsPerPush) {
            let batch = PushRequest(
                clientID: client,
                mutations: Array(mutations[start..<min(start + ProtocolLimits.maxMutationsPerPush, mutations.count)])
            )
            let response = try await transport.send(
                TransportRequest(
                    method: "POST",
                    path: Endpoint.push,
                    headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                    body: try JSONEncoder().encode(batch)
                )
            )
            guard response.status == 200 else {
                throw FerryTestServerFailure("seeding answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
            }
        }
    }

    /// Everything the server holds for `user` (deleted records as tombstones), by
    /// `entity/entityID` (`space:entity/entityID` in a space): what a test checks a client's outcome against.
    public func records(of user: String) async throws -> [String: Change] {
        let transport = transport()
        let token = try await token(for: user)
        var records: [String: Change] = [:]
        var cursor: String?
        while true {
            let query =
                "limit=\(ProtocolLimits.pullLimitRange.upperBound)"
                + (cursor.map { "&cursor=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0)" } ?? "")
            let response = try await transport.send(
                TransportRequest(method: "GET", path: Endpoint.pull + "?" + query, headers: ["Authorization": "Bearer \(token)"])
            )
            guard response.status == 200 else {
                throw FerryTestServerFailure("reading the server answered \(response.status): \(String(decoding: response.body, as: UTF8.self))")
            }
            let page = try PullResponse.decode(from: response.body)
            for change in page.changes { records[(change.space.map { "\($0):" } ?? "") + "\(change.entity)/\(change.entityID)"] = change }
            cursor = page.cursor
            if !page.hasMore { return records }
        }
    }
}

/// The test server could not start, or answered a helper's request with an error.
public struct FerryTestServerFailure: Error, Sendable, CustomStringConvertible {
    /// What failed, and the server's own words where it answered.
    public let description: String
    init(_ description: String) { self.description = description }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
