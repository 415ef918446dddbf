import AsyncHTTPClient
import Clocks
import Crypto
import FerryProtocol
import FerryServer
import FerryTesting
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// A real Ferry server on a loopback port with a real database (a SQLite file, or a database
/// of its own in the test PostgreSQL cluster), and an HTTP client for it.
public struct TestServer: HTTPServerEndpoint {
    public static let secret = "test-secret-for-ferry-0123456789abcdef"

    public let baseURL: String
    public let database: TestDatabase
    public let storage: any SyncStorage
    /// Where the server keeps attachments' bytes.
    public let attachments: any BlobStore

    /// Runs the server's attachment sweep as if it were `date` (a day ahead: what it forgets of
    /// uploads no record references); returns how many attachments' bytes went.
    @discardableResult
    public func sweepAttachments(asOf date: Date) async -> Int {
        var logger = Logger(label: "ferry.test.janitor")
        logger.logLevel = .error
        return await AttachmentJanitor(storage: storage, blobs: attachments, logger: logger).sweepOnce(now: date)
    }

    public func cursorBeforeEverything(userID: String) -> String? {
        switch storage {
        case let storage as SQLiteSyncStorage: storage.cursorBeforeEverything(userID: userID)
        case let storage as PostgresSyncStorage: storage.cursorBeforeEverything(userID: userID)
        default: nil
        }
    }

    /// Where this server's storage pauses a pull between its memberships and its spaces' rows.
    package var pullInterleaving: PullInterleaving {
        switch storage {
        case let storage as SQLiteSyncStorage: storage.interleaving
        case let storage as PostgresSyncStorage: storage.interleaving
        default: fatalError("no storage engine of this kind")
        }
    }

    /// Runs `body` against a fresh server on a fresh database of `backend`. Pass `database` to
    /// reopen an existing one.
    ///
    /// With `rateLimit`, the server limits as `ferry serve` would on that database: in process
    /// for SQLite, in the database for PostgreSQL; `rateLimitClock` replaces real time.
    public static func run<T: Sendable>(
        backend: StorageBackend = .sqlite,
        database: TestDatabase? = nil,
        rateLimit: RateLimitPolicy? = nil,
        rateLimitClock: TestClock<Duration>? = nil,
        rateLimiter: (any RateLimiter)? = nil,
        metrics: ServerMetrics = ServerMetrics(),
        logger: Logger? = nil,
        idleTimeout: Duration = .seconds(30),
        live: LiveChanges.Configuration = LiveChanges.Configuration(),
        attachmentQuota: Int64? = nil,
        blobs: BlobBackend = .file,
        attachments: (any BlobStore)? = nil,
        updatePolicy: UpdatePolicy = UpdatePolicy(),
        rules: ServerRules = ServerRules(),
        sideEffects: (any SideEffectHandler)? = nil,
        _ body: @Sendable (TestServer) async throws -> T
    ) async throws -> T {
        let database = if let database { database } else { try await TestDatabase.make(backend) }
        let storage = try await database.open()
        let attachments = if let attachments { attachments } else { try await blobs.make() }
        let rateLimiter = rateLimiter ?? rateLimit.flatMap { Self.limiter($0, storage: storage, clock: rateLimitClock) }
        return try await FerryTestServer.run(
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
        ) { server in
            try await body(TestServer(baseURL: server.baseURL.absoluteString, database: database, storage: storage, attachments: attachments))
        }
    }

    /// The limiter `ferry serve` would use on `storage`, on `clock` when one is given; `nil`
    /// lets the application make its own (in process, real time).
    public static func limiter(_ policy: RateLimitPolicy, storage: any SyncStorage, clock: TestClock<Duration>?) -> (any RateLimiter)? {
        if let postgres = storage as? PostgresSyncStorage {
            let limiter = postgres.rateLimiter(policy: policy)
            guard let clock else { return limiter }
            let start = clock.now
            // Seconds since 1970 as the database counts them, moved on only by the test clock.
            return limiter.withClock {
                1_800_000_000 + start.duration(to: clock.now).seconds
            }
        }
        return clock.map { TokenBucketRateLimiter(policy: policy, clock: $0) }
    }

    public static func temporaryDatabasePath() -> String {
        TestDirectory.make("server").appendingPathComponent("server.sqlite").path
    }

    public static func token(
        for user: String,
        secret: String = secret,
        now: Date = Date(),
        ttl: Duration = .seconds(3600),
        service: Bool = false
    ) async throws
        -> String
    {
        try await TokenAuthority(secret: secret).issue(userID: user, ttl: ttl, service: service, now: now)
    }

    /// Signs arbitrary header and claims with HS256, to build tokens the issuer would never make.
    public static func handMadeToken(
        header: [String: Any],
        claims: [String: Any],
        secret: String = secret,
        signature: Bool = true
    )
        throws -> String
    {
        func part(_ object: [String: Any]) throws -> String {
            try JSONSerialization.data(withJSONObject: object).base64URLEncodedString()
        }
        let input = try part(header) + "." + part(claims)
        guard signature else { return input + "." }
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return input + "." + Data(mac).base64URLEncodedString()
    }
}

/// A Ferry server that tests send requests to: over HTTP (in this process or another), or
/// straight to its router in process.
public protocol ServerEndpoint: Sendable {
    /// Sends one request with exactly these headers and returns the server's answer.
    func perform(_ method: HTTPMethod, _ path: String, headers: [(String, String)], body: Data?) async throws -> Reply

    /// A cursor before every change of `userID`, where the test can make one (its storage is in
    /// this process): `pullAll` then brings tombstones too, as a device that pulled before
    /// anything was written sees them. `nil` pulls from scratch, which brings none.
    func cursorBeforeEverything(userID: String) -> String?
}

extension ServerEndpoint {
    public func cursorBeforeEverything(userID: String) -> String? { nil }
}

/// A server answering at a URL over loopback HTTP.
public protocol HTTPServerEndpoint: ServerEndpoint {
    var baseURL: String { get }
}

/// A server answering at a URL, such as a `ferry serve` process.
public struct RemoteServer: HTTPServerEndpoint {
    public let baseURL: String
    public init(baseURL: String) { self.baseURL = baseURL }
}

/// A server's answer to one request.
public struct Reply: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: Data

    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: body)
    }

    public var errorCode: String? { try? decode(ErrorEnvelope.self).error.code }
    public var errorMessage: String? { try? decode(ErrorEnvelope.self).error.message }
}

extension HTTPServerEndpoint {
    public func perform(_ method: HTTPMethod, _ path: String, headers: [(String, String)], body: Data?) async throws -> Reply {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        return Reply(status: Int(response.status.code), headers: response.headers, body: Data(bytes.readableBytesView))
    }
}

extension ServerEndpoint {
    /// Sends a request with `token` as its bearer token and a JSON `body`.
    public func send(
        _ method: HTTPMethod,
        _ path: String,
        token: String? = nil,
        headers: [(String, String)] = [],
        body: Data? = nil
    ) async throws -> Reply {
        var all: [(String, String)] = []
        if let token { all.append(("Authorization", "Bearer \(token)")) }
        all += headers
        if body != nil { all.append(("Content-Type", "application/json")) }
        return try await perform(method, path, headers: all, body: body)
    }

    public func push(_ request: PushRequest, token: String) async throws -> Reply {
        try await send(.POST, "/v1/push", token: token, body: JSONEncoder().encode(request))
    }

    /// Pushes and expects 200.
    public func pushOK(_ request: PushRequest, token: String) async throws -> PushResponse {
        let reply = try await push(request, token: token)
        guard reply.status == 200 else {
            throw TestFailure("push answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
        }
        return try reply.decode(PushResponse.self)
    }

    /// A pull; `ownWrites` asks the server to leave out that client's writes with the ids `answered` names (`3-5500,5502`).
    public func pull(
        token: String,
        cursor: String? = nil,
        limit: Int? = nil,
        ownWrites: (clientID: String, answered: String)? = nil
    ) async throws -> Reply {
        var query: [String] = []
        if let cursor { query.append("cursor=\(cursor)") }
        if let limit { query.append("limit=\(limit)") }
        if let ownWrites { query.append("answered=\(ownWrites.answered)") }
        return try await send(
            .GET,
            "/v1/pull" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")),
            token: token,
            headers: ownWrites.map { [("Ferry-Client-ID", $0.clientID)] } ?? []
        )
    }

    public func pullOK(
        token: String,
        cursor: String? = nil,
        limit: Int? = nil,
        ownWrites: (clientID: String, answered: String)? = nil
    ) async throws -> PullResponse {
        let reply = try await pull(token: token, cursor: cursor, limit: limit, ownWrites: ownWrites)
        guard reply.status == 200 else {
            throw TestFailure("pull answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
        }
        return try reply.decode(PullResponse.self)
    }

    /// Pulls from the beginning until caught up; the user's records by `entity/entityID` (`space:entity/entityID` in a space), with
    /// tombstones where `cursorBeforeEverything(userID:)` gives a cursor (a pull from scratch has none).
    public func pullAll(token: String, limit: Int = 1000) async throws -> [String: Change] {
        var records: [String: Change] = [:]
        var cursor = TokenAuthority.unverifiedSubject(of: token).flatMap { cursorBeforeEverything(userID: $0) }
        repeat {
            let page = try await pullOK(token: token, cursor: cursor, limit: limit)
            for change in page.changes { records[(change.space.map { "\($0):" } ?? "") + "\(change.entity)/\(change.entityID)"] = change }
            cursor = page.cursor
            if !page.hasMore { return records }
        } while true
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension JSONObject {
    public static func value(_ number: Int64) -> JSONObject { ["value": .integer(number)] }
}
