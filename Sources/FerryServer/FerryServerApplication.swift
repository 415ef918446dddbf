import FerryProtocol
import Hummingbird
import Logging
import ServiceLifecycle

/// How to run a Ferry server.
public struct ServerConfiguration: Sendable {
    /// The address to listen on; `127.0.0.1` (loopback only) by default.
    public var host: String
    /// The TCP port to listen on; 8080 by default, 0 for a free port the system picks.
    public var port: Int
    /// The HS256 secret tokens are signed with: at least ``TokenAuthority/minimumSecretBytes`` UTF-8 bytes, or
    /// building the application throws ``TokenSecretTooShort``.
    public var jwtSecret: String
    /// `nil` turns rate limiting off.
    public var rateLimit: RateLimitPolicy?
    /// A connection that has not sent a whole request head for this long (an idle keep-alive
    /// connection, or a slow client trickling its headers) is closed, so slow clients cannot
    /// hold the server's connections.
    public var idleTimeout: Duration
    /// How long a request's body may take to arrive once its head has: a body still incomplete
    /// then is answered `408` and its connection closed, so a client trickling bytes cannot hold
    /// a request, and the memory of its body, for long.
    public var bodyTimeout: Duration
    /// Most requests of one user this process works on at once; the next is answered `429` before
    /// its body is read, so one user cannot take the server's memory and database from the others.
    public var maxRequestsPerUser: Int
    /// Most bytes of request bodies this process holds at once, all requests together; a body
    /// that would pass it is answered `503` with `Retry-After`. 256 MiB by default.
    public var maxBodyBytesInFlight = ServerConfiguration.defaultMaxBodyBytesInFlight
    /// 256 MiB: 64 pushes of the largest size at once.
    public static let defaultMaxBodyBytesInFlight = 256 * 1024 * 1024
    /// How long the server keeps tombstones and idle clients (with their kept results); cursors
    /// older than what was purged are refused with `cursor_expired`. `nil` keeps everything.
    public var retention: Duration?
    /// How often the server purges what the retention lets go.
    public var purgeInterval: Duration
    /// The event streams' limits and pacing (`GET /v1/events`).
    public var live = LiveChanges.Configuration()
    /// Where attachments' bytes live (PROTOCOL.md, "Attachments"); `nil`: this server keeps
    /// none, and the attachment endpoints answer `404`.
    public var attachments: (any BlobStore)?
    /// The largest attachment taken, in bytes (5 GiB by default).
    public var maxAttachmentBytes: Int64 = 5 * 1024 * 1024 * 1024
    /// The most bytes one user's uploads may hold, finished or in progress, answered `507
    /// quota_exceeded` past it; `nil` (the default): no limit.
    public var attachmentQuota: Int64?
    /// The most uploads in progress one user may have at once; a new one past it is answered
    /// `507 quota_exceeded` (32 by default).
    public var maxOpenUploads = ServerConfiguration.defaultMaxOpenUploads
    /// The default of `maxOpenUploads`: a phone uploads a few at a time.
    public static let defaultMaxOpenUploads = 32
    /// The least client versions served; below them a client is answered `426 update_required`.
    /// None by default.
    public var updatePolicy = UpdatePolicy()
    /// The app's rules over writes (``ServerRules``): each write of their entities goes through
    /// them in the push's transaction. None by default: every write the protocol allows is stored.
    public var rules = ServerRules()
    /// Carries out the side effects the rules ask for, after their pushes commit; `nil` (the
    /// default) keeps them waiting in the database for a process that has one.
    public var sideEffects: (any SideEffectHandler)?
    /// How long a process holds a side effect it took: one its process was killed holding goes to
    /// another process after this, and a delivery that takes half of it fails and is tried
    /// again. Five minutes by default; at least a second.
    public var sideEffectLease: Duration = .seconds(300)

    /// A configuration; by default the server listens on `127.0.0.1:8080`, with the default rate limit,
    /// 30-second idle and body timeouts, at most 4 requests of a user at once, and a retention of
    /// 30 days (the time cursors are valid), purged every hour.
    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        jwtSecret: String,
        rateLimit: RateLimitPolicy? = .default,
        idleTimeout: Duration = .seconds(30),
        bodyTimeout: Duration = .seconds(30),
        maxRequestsPerUser: Int = 4,
        retention: Duration? = .seconds(30 * 86_400),
        purgeInterval: Duration = .seconds(3600)
    ) {
        self.retention = retention
        self.purgeInterval = purgeInterval
        self.host = host
        self.port = port
        self.jwtSecret = jwtSecret
        self.rateLimit = rateLimit
        self.idleTimeout = idleTimeout
        self.bodyTimeout = bodyTimeout
        self.maxRequestsPerUser = maxRequestsPerUser
    }
}

/// Assembles the reference server: routes, middleware, storage and metrics.
public enum FerryServerApplication {
    /// Paths the server answers, with the one method each accepts.
    static let routes: [String: [HTTPRequest.Method]] = [
        Endpoint.health: [.get], Endpoint.push: [.post], Endpoint.pull: [.get], Endpoint.events: [.get], "/metrics": [.get], Endpoint.spaces: [.get],
        Endpoint.spaces + "/{space}": [.put, .delete], Endpoint.spaces + "/{space}/members": [.get],
        Endpoint.spaces + "/{space}/members/{user}": [.put, .delete], Endpoint.attachments: [.post],
        Endpoint.attachments + "/{digest}": [.head, .get, .post],
        Endpoint.attachments + "/{digest}/upload": [.head, .patch, .delete],
    ]

    /// The routes and their middleware; `OpenAPITests` reads its routes.
    static func router(
        controller: SyncController,
        live: LiveChanges = LiveChanges(),
        attachments: AttachmentController? = nil,
        authority: TokenAuthority,
        limiter: (any RateLimiter)?,
        maxRequestsPerUser: Int = ServerConfiguration(jwtSecret: "").maxRequestsPerUser,
        updatePolicy: UpdatePolicy = UpdatePolicy(),
        metrics: ServerMetrics,
        logger: Logger
    ) -> Router<FerryRequestContext> {
        let router = Router(context: FerryRequestContext.self)
        var accessLogger = logger
        accessLogger[metadataKey: "log"] = "access"
        router.add(middleware: AccessLogMiddleware(logger: accessLogger))
        router.add(middleware: MetricsMiddleware(metrics: metrics))
        router.add(middleware: ErrorEnvelopeMiddleware(routes: routes))
        router.get("\(Endpoint.health)", use: controller.health)
        router.get("/metrics", use: controller.metricsText)
        let authenticated = router.group()
            .add(middleware: AuthMiddleware(authority: authority, metrics: metrics))
            .add(middleware: ClientVersionMiddleware(policy: updatePolicy))
        // Before the quota: a request refused for this costs none of it, nor a database round trip.
        authenticated.add(middleware: UserConcurrencyMiddleware(limit: maxRequestsPerUser, metrics: metrics))
        if let limiter {
            authenticated.add(middleware: RateLimitMiddleware(limiter: limiter, metrics: metrics))
        }
        authenticated.post("\(Endpoint.push)", use: controller.push)
        authenticated.get("\(Endpoint.pull)", use: controller.pull)
        authenticated.get("\(Endpoint.events)", use: EventStreamController(storage: controller.storage, live: live).events)
        let spaces = SpaceController(storage: controller.storage)
        authenticated.get("\(Endpoint.spaces)", use: spaces.list)
        authenticated.put("\(Endpoint.spaces)/{space}", use: spaces.create)
        authenticated.delete("\(Endpoint.spaces)/{space}", use: spaces.delete)
        authenticated.get("\(Endpoint.spaces)/{space}/members", use: spaces.members)
        authenticated.put("\(Endpoint.spaces)/{space}/members/{user}", use: spaces.setRole)
        authenticated.delete("\(Endpoint.spaces)/{space}/members/{user}", use: spaces.removeMember)
        // Without a store, the routes answer 404 as the protocol says, not 405.
        let off: @Sendable (Request, FerryRequestContext) async throws -> Response = { _, _ in
            throw FerryHTTPError(.notFound, "this server keeps no attachments (ferry serve --attachments)")
        }
        authenticated.post("\(Endpoint.attachments)", use: attachments?.held ?? off)
        authenticated.head("\(Endpoint.attachments)/{digest}", use: attachments?.head ?? off)
        authenticated.get("\(Endpoint.attachments)/{digest}", use: attachments?.get ?? off)
        authenticated.post("\(Endpoint.attachments)/{digest}", use: attachments?.create ?? off)
        authenticated.head("\(Endpoint.attachments)/{digest}/upload", use: attachments?.offset ?? off)
        authenticated.patch("\(Endpoint.attachments)/{digest}/upload", use: attachments?.resume ?? off)
        authenticated.delete("\(Endpoint.attachments)/{digest}/upload", use: attachments?.cancel ?? off)
        return router
    }

    /// Builds the application. The storage is closed when the application shuts down,
    /// after the HTTP server has finished its in-flight requests.
    public static func make(
        configuration: ServerConfiguration,
        storage: any SyncStorage,
        rateLimiter: (any RateLimiter)? = nil,
        metrics: ServerMetrics = ServerMetrics(),
        logger: Logger = Logger(label: "ferry.server"),
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws -> some ApplicationProtocol {
        let authority = try await TokenAuthority(secret: configuration.jwtSecret)
        let limiter = rateLimiter ?? configuration.rateLimit.map { TokenBucketRateLimiter(policy: $0) }
        let controller = SyncController(
            storage: storage,
            metrics: metrics,
            bodyTimeout: configuration.bodyTimeout,
            bodies: BodyBudget(limit: configuration.maxBodyBytesInFlight),
            attachments: configuration.attachments != nil,
            updatePolicy: configuration.updatePolicy,
            rules: configuration.rules
        )
        let live = LiveChanges(configuration: configuration.live)

        let router = router(
            controller: controller,
            live: live,
            attachments: configuration.attachments.map {
                AttachmentController(
                    storage: storage,
                    blobs: $0,
                    maxAttachmentBytes: configuration.maxAttachmentBytes,
                    quota: configuration.attachmentQuota,
                    maxOpenUploads: configuration.maxOpenUploads,
                    bodyTimeout: configuration.bodyTimeout,
                    metrics: metrics
                )
            },
            authority: authority,
            limiter: limiter,
            maxRequestsPerUser: configuration.maxRequestsPerUser,
            updatePolicy: configuration.updatePolicy,
            metrics: metrics,
            logger: logger
        )

        return Application(
            router: router,
            server: .http1(configuration: .init(idleTimeout: .nanoseconds(Int64(configuration.idleTimeout / .nanoseconds(1))))),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "ferry"),
            services: [StorageCloser(storage: storage, logger: logger), LiveChangeService(storage: storage, live: live, logger: logger)]
                + (configuration.sideEffects.map { handler in
                    var worker = SideEffectWorker(storage: storage, handler: handler, metrics: metrics, logger: logger)
                    worker.pacing.lease = max(configuration.sideEffectLease, .seconds(1))
                    return [worker]
                } ?? [])
                + (configuration.retention.map { retention in
                    [
                        RetentionService(
                            storage: storage,
                            retention: retention,
                            interval: configuration.purgeInterval,
                            metrics: metrics,
                            logger: logger
                        )
                    ]
                } ?? [])
                + (configuration.attachments.map { [AttachmentJanitor(storage: storage, blobs: $0, metrics: metrics, logger: logger)] } ?? []),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
            logger: logger
        )
    }
}

/// Closes the storage once graceful shutdown has begun. It is listed before the
/// HTTP server, so the service group stops the server (letting in-flight requests
/// finish) before this closes the database.
struct StorageCloser: Service {
    let storage: any SyncStorage
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        do {
            try await storage.close()
            logger.info("database closed")
        } catch {
            logger.error("closing the database failed", metadata: ["error": "\(error)"])
            throw error
        }
    }
}
