import FerryProtocol
import FerryRules
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PostgresNIO

/// The production storage engine: PostgreSQL through PostgresNIO's connection pool, shared
/// by any number of server processes.
///
/// **Change order.** Each user has a row in `user_changes` holding the last change position
/// handed out. A push locks that row first (`SELECT … FOR UPDATE`) and keeps the lock until
/// it commits, so one user's pushes run one at a time, whichever process serves them, and a
/// push takes its positions only after every push that took smaller ones has committed.
/// A pull reads one snapshot: if it sees a change at position N, it sees every change of
/// that user below N, so a cursor never passes a change that commits later. (A shared
/// sequence would not do: `nextval` hands out numbers in start order, not commit order.)
///
/// The same lock makes a push's reads and writes one step: a client's retried batch that
/// reaches two processes at once is applied by the first and answered from its kept
/// results by the second, and natural keys are decided on data no other push is changing.
/// The unique indexes stay the last word: a write that breaks one is `rejected`.
public final class PostgresSyncStorage: SyncStorage {
    let client: PostgresClient
    private let running: Task<Void, Never>
    let cursors: CursorCodec
    let logger: Logger
    /// The server and database this storage is connected to.
    public let location: PostgresLocation
    /// How long a request may wait for a connection from the pool before it is answered 503.
    private let deadline: Duration
    /// Set by `close()`: the pool then fails every request with an error of its own module.
    private let closed = NIOLockedValueBox(false)
    private let pushes = UserLine()
    /// This process's epoch (`ChangeHead`): a database restored under it shows in the cursors.
    let epoch = newEpoch()
    /// Where a test pauses a pull between its memberships and its spaces' rows.
    package let interleaving = PullInterleaving()
    /// How the connection that listens for changes connects (`followChanges`).
    let listenerConfiguration: PostgresConnection.Configuration
    /// The listening connection made by `connect`, until `followChanges` takes it.
    let firstListening: NIOLockedValueBox<Listening?>

    /// Connects, applies missing migrations, and keeps at most `poolSize` connections open.
    public static func connect(
        to location: PostgresLocation,
        poolSize: Int = 10,
        deadline: Duration = .seconds(10),
        logger: Logger = Logger(label: "ferry.postgres")
    ) async throws -> PostgresSyncStorage {
        // One connection of its own first: a server that cannot be reached, a wrong password or
        // a missing database fail here with the reason (a pool would keep retrying), and the
        // schema is migrated on it.
        let secret: ByteBuffer
        var listener: PostgresConnection.Configuration
        do {
            var configuration = PostgresConnection.Configuration(
                host: location.host,
                port: location.port,
                username: location.username,
                password: location.password,
                database: location.database,
                tls: try connectionTLS(location.tls)
            )
            configuration.options.connectTimeout = .seconds(10)
            listener = configuration
            listener.options.additionalStartupParameters = [("application_name", listenerName)]
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            do {
                secret = try await PostgresSchema.migrate(connection, logger: logger)
                try await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError.unavailable("cannot use PostgreSQL at \(location): \(Self.explain(error))")
        }
        var configuration = PostgresClient.Configuration(
            host: location.host,
            port: location.port,
            username: location.username,
            password: location.password,
            database: location.database,
            tls: poolTLS(location.tls)
        )
        configuration.options.maximumConnections = poolSize
        configuration.options.connectTimeout = .seconds(10)
        // Safety nets on the server side: no statement runs for more than 30 s or waits for a
        // user's lock for more than 10 s (both answered 503), and a transaction left open by a
        // frozen process is ended after 60 s, releasing its user's lock.
        // A commit must be durable before a push is answered, whatever the role's default.
        configuration.options.additionalStartupParameters =
            [
                ("statement_timeout", "30s"), ("lock_timeout", "10s"), ("idle_in_transaction_session_timeout", "60s"),
                ("synchronous_commit", "on"),
            ]
        // Listening before the server answers anything: no commit from then on goes unheard.
        let listening: Listening
        do {
            listening = try await Self.listen(listener, logger: logger)
        } catch {
            throw StorageError.unavailable("cannot listen for changes on PostgreSQL at \(location): \(Self.explain(error))")
        }
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return PostgresSyncStorage(
            client: client,
            running: Task { await client.run() },
            cursors: CursorCodec(secret: Data(secret.readableBytesView)),
            logger: logger,
            location: location,
            deadline: deadline,
            listenerConfiguration: listener,
            listening: listening
        )
    }

    /// Plans that do not decay, for the one statement whose plan statistics can ruin: a pull
    /// page walks `records_pull` in change order and stops at its page. After a bulk load, stale
    /// statistics made PostgreSQL pick a bitmap scan plus a sort of everything after the cursor
    /// for each page: quadratic over a large sync. Without sequential and bitmap scans (and hash
    /// or merge joins) a page can only walk an index, and `records_pull` is the one in its order.
    /// A pull sets these in its own transaction only (`set_config(…, true)`, as `SET LOCAL`:
    /// `snapshot`); every other statement on the pool is planned as PostgreSQL plans it. A push's
    /// lookup needs none: a LATERAL probe per key has no other plan. `PostgresPlanTests` checks
    /// the plans with EXPLAIN.
    static let planSettings = ["enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin"]

    /// The statement that turns `planSettings` off until the end of the transaction it runs in.
    static let walkIndexesSQL = "SELECT " + planSettings.map { "set_config('\($0)', 'off', true)" }.joined(separator: ", ")

    private init(
        client: PostgresClient,
        running: Task<Void, Never>,
        cursors: CursorCodec,
        logger: Logger,
        location: PostgresLocation,
        deadline: Duration,
        listenerConfiguration: PostgresConnection.Configuration,
        listening: Listening
    ) {
        self.listenerConfiguration = listenerConfiguration
        self.firstListening = NIOLockedValueBox(listening)
        self.deadline = deadline
        self.client = client
        self.running = running
        self.cursors = cursors
        self.logger = logger
        self.location = location
    }

    /// TLS settings for `sslmode`: `require` encrypts without checking the certificate, as libpq's does.
    private static func tlsConfiguration(_ mode: PostgresLocation.TLSMode) -> TLSConfiguration? {
        switch mode {
        case .disable:
            return nil
        case .require:
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .none
            return configuration
        case .verifyFull:
            return .makeClientConfiguration()
        }
    }

    private static func connectionTLS(_ mode: PostgresLocation.TLSMode) throws -> PostgresConnection.Configuration.TLS {
        try tlsConfiguration(mode).map { try .require(.init(configuration: $0)) } ?? .disable
    }

    private static func poolTLS(_ mode: PostgresLocation.TLSMode) -> PostgresClient.Configuration.TLS {
        tlsConfiguration(mode).map { .require($0) } ?? .disable
    }

    /// A limiter drawing on quotas kept in this database, shared by every process using it.
    public func rateLimiter(policy: RateLimitPolicy) -> PostgresRateLimiter {
        PostgresRateLimiter(storage: self, policy: policy)
    }

    /// Deletes, in one transaction, the tombstones written before `cutoff` (each user's purge
    /// horizon moved past them first) and the clients that have not pushed since, with their
    /// kept results; then refreshes the planner's statistics of what changed.
    public func purge(before cutoff: Int64) async throws -> PurgeReport {
        let report = try await withDatabase { [logger] db in
            try await Self.transaction(db, logger: logger) { db in
                var report = PurgeReport()
                for try await (users, tombstones) in try await db.query(
                    """
                    WITH old AS (
                        SELECT user_id, max(seq) AS through FROM records WHERE deleted AND written_at < \(cutoff) GROUP BY user_id
                    ), moved AS (
                        UPDATE user_changes u SET purged_through = greatest(u.purged_through, old.through) FROM old
                        WHERE u.user_id = old.user_id RETURNING u.user_id
                    ), deleted AS (
                        DELETE FROM records r USING old
                        WHERE r.user_id = old.user_id AND r.deleted AND r.written_at < \(cutoff) AND r.seq <= old.through RETURNING 1
                    )
                    SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM deleted)
                    """,
                    logger: logger
                ).decode((Int, Int).self) {
                    report.users = users
                    report.tombstones = tombstones
                }
                // A purged tombstone's attachments are no longer its: without another reference
                // they go with the uploads that expire.
                try await db.query(
                    """
                    DELETE FROM attachment_refs a WHERE NOT EXISTS (SELECT 1 FROM records r
                        WHERE r.user_id = a.partition AND r.entity = a.entity AND r.entity_id = a.entity_id)
                    """,
                    logger: logger
                )
                for try await clients in try await db.query(
                    """
                    WITH idle AS (DELETE FROM clients WHERE last_seen_at < \(cutoff) RETURNING user_id, client_id),
                    results AS (DELETE FROM client_results c USING idle WHERE c.user_id = idle.user_id AND c.client_id = idle.client_id)
                    SELECT count(*) FROM idle
                    """,
                    logger: logger
                ).decode(Int.self) {
                    report.clients = clients
                }
                // Side effects delivered before the retention are forgotten.
                try await db.query("DELETE FROM side_effects WHERE delivered_at < \(cutoff)", logger: logger)
                return report
            }
        }
        if report.tombstones > 0 || report.clients > 0 {
            // Statistics follow what the purge changed (a pull's plan does not depend on them: `planSettings`).
            try await withDatabase { [logger] db in _ = try await db.query("ANALYZE records, clients, client_results", logger: logger).collect() }
        }
        return report
    }

    /// A cursor standing before every change, as a device that pulled before anything was written
    /// holds: pulls from it bring tombstones too. For tests that look at every change.
    package func cursorBeforeEverything(userID: String) -> String {
        cursors.encode(PullCursor(position: 0), userID: userID)
    }

    /// The plan PostgreSQL picks for `query` on one of this pool's sessions (`EXPLAIN`, one line
    /// per node), for tests and diagnostics; `inPull`, in a pull's transaction (`snapshot`).
    package func plan(of query: PostgresQuery, inPull: Bool = false) async throws -> String {
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
        return try await withDatabase { [logger] db in
            let explained = { (db: PostgresConnection) in
                var lines: [String] = []
                for try await line in try await db.query(explain, logger: logger).decode(String.self) { lines.append(line) }
                return lines.joined(separator: "\n")
            }
            return inPull ? try await Self.snapshot(db, logger: logger, explained) : try await explained(db)
        }
    }

    /// Runs `SELECT 1`; throws ``StorageError`` when no connection is available within the deadline.
    public func checkHealth() async throws {
        try await withDatabase { [logger] db in _ = try await db.query("SELECT 1", logger: logger).collect() }
    }

    /// Stops the pool: its connections close once the requests using them are done.
    public func close() async throws {
        closed.withLockedValue { $0 = true }
        if let listening = firstListening.withLockedValue({ $0.take() }) { await listening.close() }
        running.cancel()
        await running.value
    }

    // MARK: - Errors

    /// `body` in a transaction on `connection`; throws the error `body` threw, not PostgresNIO's
    /// wrapper around it.
    static func transaction<T: Sendable>(
        _ connection: PostgresConnection,
        logger: Logger,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await connection.withTransaction(logger: logger) { db in try await body(db) }
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.commitError ?? error.beginError ?? error
        }
    }

    /// Runs `body` on a connection from the pool. Waiting for one takes at most the deadline:
    /// while PostgreSQL is down the pool keeps trying to connect and would hold the request for
    /// a minute. Once leased, `body` runs to its end (PostgreSQL's `statement_timeout` bounds it).
    ///
    /// Failures a client should retry (no connection, a server shutting down or out of
    /// resources, a closed pool) become `StorageError.unavailable`; an error PostgreSQL reports
    /// about a statement is a bug of this server and stays as it is (a 500).
    ///
    /// With `queueingFor`, the request first waits for that user's earlier pushes in this
    /// process (`UserLine`); the deadline covers that wait too.
    func withDatabase<T: Sendable>(
        queueingFor userID: String? = nil,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let (leased, signal) = AsyncStream.makeStream(of: Never.self)
        do {
            return try await withThrowingTaskGroup(of: T?.self) { [client, deadline, location, pushes] group in
                group.addTask {
                    let lease = {
                        try await client.withConnection { connection in
                            signal.finish()
                            return try await body(connection)
                        }
                    }
                    guard let userID else { return try await lease() }
                    return try await pushes.run(for: userID, lease)
                }
                group.addTask {
                    do {
                        try await withTimeLimit(deadline, clock: ContinuousClock(), awaitingCancelledWork: true) { for await _ in leased {} }
                    } catch is TimeLimitExceeded {
                        throw StorageError.unavailable("no connection to PostgreSQL at \(location) within \(deadline)")
                    }
                    return nil
                }
                var value: T?
                for try await result in group where result != nil { value = result }
                return value!  // the first task returned or the group threw
            }
        } catch let error as StorageError {
            throw error
        } catch let error as ProtocolViolation {
            throw error
        } catch let error as RuleUnavailable {
            throw error  // the app's rule said "not now": the controller answers it
        } catch let error as PSQLError where !error.isTransient {
            throw error  // a statement this server got wrong: a 500 with a request id
        } catch let error as PostgresDecodingError {
            throw error
        } catch {
            // The pool's own errors (closed, or its circuit breaker tripped while PostgreSQL is
            // down) come from a module of its own, like the network's: "not now".
            throw StorageError.unavailable(
                "PostgreSQL at \(location): \(closed.withLockedValue { $0 } ? "the server is shutting down" : Self.explain(error))"
            )
        }
    }

    /// What went wrong, in the server's words when it sent any.
    static func explain(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] {
            return message + (error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? "")
        }
        if let underlying = error.underlying { return "\(error.code): \(underlying)" }
        return "\(error.code)"
    }
}

extension PSQLError {
    /// The database refused a value of a mutation: a constraint (class 23), a character it
    /// cannot hold (22021), or a limit such as an index row's size (54000). Other errors of
    /// those classes are this server's bugs and stay 500s, never a `rejected` that loses data. The batch is then
    /// applied one mutation at a time and the refused one is `rejected` with the reason.
    var isRefusedWrite: Bool {
        let state = serverInfo?[.sqlState] ?? ""
        return state.hasPrefix("23") || state == "22021" || state == "54000"
    }

    /// A failure that says nothing about the request: retrying later may succeed.
    var isTransient: Bool {
        switch code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed, .uncleanShutdown, .queryCancelled:
            return true
        case .server:
            // 08: connection, 40: serialization and deadlock, 53: resources, 57: shutdown and
            // statement timeout, 55P03: lock timeout, 25006: a read-only standby after a failover.
            let state = serverInfo?[.sqlState] ?? ""
            return ["08", "40", "53", "57", "55P03", "25006"].contains(where: state.hasPrefix)
        default:
            return false
        }
    }
}
