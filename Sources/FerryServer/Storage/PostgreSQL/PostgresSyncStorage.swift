import FerryProtocol
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
    private let cursors: CursorCodec
    let logger: Logger
    /// The server and database this storage is connected to.
    public let location: PostgresLocation
    /// How long a request may wait for a connection from the pool before it is answered 503.
    private let deadline: Duration
    /// Set by `close()`: the pool then fails every request with an error of its own module.
    private let closed = NIOLockedValueBox(false)
    private let pushes = UserLine()
    /// This process's epoch (`ChangeHead`): a database restored under it shows in the cursors.
    private let epoch = newEpoch()
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
            ] + planSettings
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

    /// Plans that do not decay. Every statement Ferry runs is an index walk by design: a push
    /// probes records by key (a nested loop over the batch's keys), a pull walks `records_pull` in
    /// change order and stops at its page. After a bulk load, stale statistics made PostgreSQL pick
    /// a hash join over all of a user's records for each push and a bitmap scan plus a sort of
    /// everything after the cursor for each page: quadratic over a large sync. Without sequential
    /// and bitmap scans a page can only walk an index, and `records_pull` is the one in its order
    /// (sorts stay allowed: some statements need one, as reading `client_results` in order). These settings
    /// (on this pool's sessions only) price those plans out whatever the statistics say; where no
    /// other plan exists PostgreSQL still uses them. `PostgresPlanTests` checks the plans with EXPLAIN.
    static let planSettings: [(String, String)] = [
        ("enable_seqscan", "off"), ("enable_bitmapscan", "off"), ("enable_hashjoin", "off"), ("enable_mergejoin", "off"),
    ]

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

    // MARK: - Push

    /// Applies the batch in one transaction that holds the user's change-position lock, as the overview describes.
    /// Throws ``StorageError`` when no connection is available within the deadline.
    public func push(caller: Caller, clientID: String, mutations: [IncomingMutation]) async throws -> PushResponse {
        try await withDatabase(queueingFor: caller.userID) { [logger, epoch] db in
            try await Self.push(mutations, caller: caller, clientID: clientID, epoch: epoch, db: db, logger: logger)
        }
    }

    /// A push's transaction, and again one mutation at a time if the database refused a write.
    private static func push(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        do {
            return try await Self.transaction(db, logger: logger) { db in
                try await Self.push(mutations, caller: caller, clientID: clientID, oneByOne: false, epoch: epoch, db: db, logger: logger)
            }
        } catch let error as PSQLError where error.isRefusedWrite {
            // The planner should make this impossible; if a rule was missed, the batch
            // (rolled back whole) still gets one result per mutation instead of a 500.
            return try await Self.transaction(db, logger: logger) { db in
                try await Self.push(mutations, caller: caller, clientID: clientID, oneByOne: true, epoch: epoch, db: db, logger: logger)
            }
        }
    }

    /// One push's transaction: takes the user's lock and reads the client's position (and, for
    /// a resend, its recent results), applies the batch, then, if it processed new mutations,
    /// stores the client's new position and all its results. Seven round trips, whatever the
    /// batch's size: a round trip is most of a push's cost.
    private static func push(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        oneByOne: Bool,
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        let userID = caller.userID
        let (position, lastMutationID, pushes) = try await lock(userID, clientID: clientID, db: db, logger: logger)
        if pushes == 0 {
            // A client this server does not know: one more of the user's, within the limit.
            for try await count in try await db.query("SELECT count(*) FROM clients WHERE user_id = \(userID)", logger: logger).decode(Int.self)
            where count >= ProtocolLimits.maxClientsPerUser {
                throw ProtocolViolation.tooManyClients
            }
        }
        // Most pushes carry new ids only: the kept results are read for a resend alone, the
        // older of the two slots first.
        var replays: [Int64: RecentResults.Kept] = [:]
        if mutations.contains(where: { $0.mutation.id <= lastMutationID }) {
            var kept: [Data] = []
            for try await results in try await db.query(
                """
                SELECT results FROM client_results WHERE user_id = \(userID) AND client_id = \(clientID)
                ORDER BY slot = \(Int((pushes - 1) % 2))
                """,
                logger: logger
            ).decode(ByteBuffer.self) {
                kept.append(Data(results.readableBytesView))
            }
            replays = try RecentResults.decode(kept)
        }

        let batch = SpacedBatch(mutations)
        // The spaces' change locks, in order of key after the user's (no two pushes wait for
        // each other in a cycle), then the memberships again: a statement after the locks sees
        // every deletion and membership change that committed before them, and the whole batch
        // is judged by that one statement. A space that became writable between the two reads
        // is locked and read again, so every space the judgement lets the batch write is locked.
        var positions = [userID: position]
        var targets: [String: SpacedBatch.Target] = [:]
        if !batch.spaceIDs.isEmpty {
            targets = try await Self.targets(of: batch, caller: caller, db: db, logger: logger)
            while case let unlocked = targets.values.filter({
                (caller.isService || $0.role?.canWrite == true) && positions[SpacePartition.name($0.key)] == nil
            }), !unlocked.isEmpty {
                for key in unlocked.map(\.key).sorted() {
                    positions[SpacePartition.name(key)] = try await lockChanges(of: SpacePartition.name(key), db: db, logger: logger)
                }
                targets = try await Self.targets(of: batch, caller: caller, db: db, logger: logger)
            }
        }
        var (groups, refused) = batch.groups(caller: caller, clientID: clientID, targets: targets, lastMutationID: lastMutationID, replays: replays)
        for refusal in batch.readableRefusals(refused, targets: targets) {
            var current = RecordState.absent
            for try await (version, deleted, naturalKey, data, changedAt) in try await db.query(
                """
                SELECT version, deleted, natural_key, data, changed_at FROM records
                WHERE user_id = \(refusal.partition) AND entity = \(refusal.entity) AND entity_id = \(refusal.entityID)
                """,
                logger: logger
            ).decode((Int64, Bool, String?, ByteBuffer?, Int64?).self) {
                current = try StoredRecord(
                    entity: refusal.entity,
                    entityID: refusal.entityID,
                    version: version,
                    deleted: deleted,
                    naturalKey: naturalKey,
                    data: data.map { Data($0.readableBytesView) },
                    changedAt: changedAt
                ).state()
            }
            refused[refusal.id]?.current = current
        }
        var responses: [PushResponse] = []
        for group in groups {
            guard let position = positions[group.partition] else { throw StorageError.corrupt("a space written without its lock") }
            responses.append(
                try await apply(
                    group.mutations,
                    clientID: group.writer,
                    partition: group.partition,
                    after: position,
                    oneByOne: oneByOne,
                    lastMutationID: lastMutationID,
                    replays: replays,
                    epoch: epoch,
                    db: db,
                    logger: logger
                )
            )
        }
        let response = batch.response(lastMutationID: lastMutationID, groups: responses, refused: refused)
        // Announced in the transaction: PostgreSQL delivers it to every process at the commit,
        // and never without it, so no commit goes unannounced whatever fails after it.
        try await notify(
            ChangeSignal.of(push: mutations, response: response, after: lastMutationID, caller: caller, clientID: clientID),
            db: db,
            logger: logger
        )
        // A push of resent mutations only changes nothing.
        guard response.lastMutationID > lastMutationID else { return response }
        let results = ByteBuffer(data: RecentResults.encode(response.results, of: mutations, lastMutationID: lastMutationID, replays: replays))
        try await db.query(
            """
            WITH client AS (
                INSERT INTO clients (user_id, client_id, last_mutation_id, pushes, last_seen_at)
                VALUES (\(userID), \(clientID), \(response.lastMutationID), 1, \(serverMilliseconds()))
                ON CONFLICT (user_id, client_id) DO UPDATE SET last_mutation_id = excluded.last_mutation_id, pushes = clients.pushes + 1,
                    last_seen_at = excluded.last_seen_at
            )
            INSERT INTO client_results (user_id, client_id, slot, results) VALUES (\(userID), \(clientID), \(Int(pushes % 2)), \(results))
            ON CONFLICT (user_id, client_id, slot) DO UPDATE SET results = excluded.results
            """,
            logger: logger
        )
        return response
    }

    /// The live spaces `batch` names, by id, with the caller's role in each.
    private static func targets(
        of batch: SpacedBatch,
        caller: Caller,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> [String: SpacedBatch.Target] {
        var targets: [String: SpacedBatch.Target] = [:]
        for try await (id, key, role) in try await db.query(
            """
            SELECT s.id, s.key, m.role FROM spaces s LEFT JOIN space_members m ON m.space_key = s.key AND m.user_id = \(caller.userID)
            WHERE NOT s.deleted AND s.id = ANY(\(batch.spaceIDs)::text[])
            """,
            logger: logger
        ).decode((String, Int64, String?).self) {
            targets[id] = SpacedBatch.Target(key: key, role: role.flatMap(SpaceRole.init(rawValue:)))
        }
        return targets
    }

    /// One history's mutations of a push (`SpacedBatch.Group`), written after `position`, all at
    /// once or, with `oneByOne`, each in a savepoint.
    private static func apply(
        _ mutations: [IncomingMutation],
        clientID: String,
        partition userID: String,
        after position: Int64,
        oneByOne: Bool,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        let response: PushResponse
        if oneByOne {
            // One mutation per savepoint: one whose write breaks a constraint is `rejected`
            // with the database's reason, and the others are applied as usual.
            var last = lastMutationID
            var results: [PushResult] = []
            var position = position
            for incoming in mutations {
                try await db.query("SAVEPOINT mutation", logger: logger)
                do {
                    let plan = try await plan(
                        [incoming],
                        clientID: clientID,
                        lastMutationID: last,
                        replays: replays,
                        userID: userID,
                        db: db,
                        logger: logger
                    )
                    try await release(plan, userID: userID, db: db, logger: logger)
                    if !plan.writes.isEmpty { try await db.query(write(plan.writes, after: position, userID: userID, epoch: epoch), logger: logger) }
                    try await db.query("RELEASE SAVEPOINT mutation", logger: logger)
                    position += Int64(plan.writes.count)
                    results.append(plan.response.results[0])
                } catch let error as PSQLError where error.isRefusedWrite {
                    try await db.query("ROLLBACK TO SAVEPOINT mutation", logger: logger)
                    results.append(
                        PushResult(
                            id: incoming.mutation.id,
                            status: .rejected,
                            entityID: nil,
                            version: nil,
                            error: "the server cannot store this mutation: \(error.serverInfo?[.message] ?? "a constraint failed")"
                        )
                    )
                }
                last = max(last, incoming.mutation.id)
            }
            response = PushResponse(lastMutationID: last, results: results)
        } else {
            let plan = try await plan(
                mutations,
                clientID: clientID,
                lastMutationID: lastMutationID,
                replays: replays,
                userID: userID,
                db: db,
                logger: logger
            )
            try await release(plan, userID: userID, db: db, logger: logger)
            if !plan.writes.isEmpty { try await db.query(write(plan.writes, after: position, userID: userID, epoch: epoch), logger: logger) }
            response = plan.response
        }
        return response
    }

    /// Locks the user's change position until the transaction ends; returns it with the
    /// client's `lastMutationID` and count of pushes (0 for a new client).
    ///
    /// The client is read by a statement of its own, after the lock: under READ COMMITTED a
    /// statement that waited for a row lock re-reads that row but not the rows it joined, so a
    /// join would read the client as it was before the push that held the lock, and apply a
    /// resent batch twice.
    private static func lock(
        _ userID: String,
        clientID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws
        -> (position: Int64, lastMutationID: Int64, pushes: Int64)
    {
        let position = try await lockChanges(of: userID, db: db, logger: logger)
        for try await (last, pushes) in try await db.query(
            "SELECT last_mutation_id, pushes FROM clients WHERE user_id = \(userID) AND client_id = \(clientID)",
            logger: logger
        ).decode((Int64, Int64).self) {
            return (position, last, pushes)
        }
        return (position, 0, 0)
    }

    static func lockChanges(of userID: String, db: PostgresConnection, logger: Logger) async throws -> Int64 {
        for attempt in 0..<2 {
            for try await position in try await db.query(
                "SELECT position FROM user_changes WHERE user_id = \(userID) FOR UPDATE",
                logger: logger
            ).decode(Int64.self) {
                return position
            }
            // A user's first push: create the row. If another process creates it first, this
            // insert waits for that transaction and does nothing; the lock is then taken above.
            if attempt == 0 {
                try await db.query(
                    "INSERT INTO user_changes (user_id, position) VALUES (\(userID), 0) ON CONFLICT (user_id) DO NOTHING",
                    logger: logger
                )
            }
        }
        throw StorageError.corrupt("user_changes has no row for a user just inserted")
    }

    /// Loads what a batch touches and decides every result.
    private static func plan(
        _ mutations: [IncomingMutation],
        clientID: String,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        userID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> BatchPlanner.BatchPlan {
        let loaded = try await load(BatchPlanner.lookups(for: mutations, replays: replays), userID: userID, db: db, logger: logger)
        var planner = BatchPlanner(
            clientID: clientID,
            lastMutationID: lastMutationID,
            replays: replays,
            loaded: loaded
        )
        return planner.plan(mutations)
    }

    /// Every record a batch names by identity and every live holder of its natural keys, in one query.
    private static func load(
        _ lookups: BatchPlanner.Lookups,
        userID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws
        -> [StoredRecord]
    {
        let keys = Array(lookups.keys)
        let naturalKeys = Array(lookups.naturalKeys)
        var found: [RecordKey: StoredRecord] = [:]
        for try await (entity, entityID, version, deleted, naturalKey, data, changedAt) in try await db.query(
            loadQuery(keys: keys, naturalKeys: naturalKeys, userID: userID),
            logger: logger
        ).decode((String, String, Int64, Bool, String?, ByteBuffer?, Int64?).self) {
            let record = StoredRecord(
                entity: entity,
                entityID: entityID,
                version: version,
                deleted: deleted,
                naturalKey: naturalKey,
                data: data.map { Data($0.readableBytesView) },
                changedAt: changedAt
            )
            found[record.key] = record
        }
        return Array(found.values)
    }

    /// A push's lookup: the records named by `keys` and the live holders of `naturalKeys`, each
    /// an index probe (the primary key, `records_live_natural_key`) per key. Each probe is a
    /// LATERAL subquery with a LIMIT, which PostgreSQL cannot turn into a join: whatever the
    /// statistics say, it walks the batch's keys and probes for each, and never scans the user's
    /// records against the keys (a join that stale statistics made it pick, quadratic in the data).
    /// Which index each probe uses does not depend on statistics either: `records.user_id` and
    /// `records.seq` keep none (`PostgresSchema` migration 5), so every user looks the same size to
    /// the planner and the unique key is always the cheapest probe.
    static func loadQuery(keys: [RecordKey], naturalKeys: [NaturalKeyRef], userID: String) -> PostgresQuery {
        """
        SELECT r.entity, r.entity_id, r.version, r.deleted, r.natural_key, r.data, r.changed_at
        FROM unnest(\(keys.map(\.entity))::text[], \(keys.map(\.entityID))::text[]) AS w (entity, entity_id)
        CROSS JOIN LATERAL (
            SELECT * FROM records r WHERE r.user_id = \(userID) AND r.entity = w.entity AND r.entity_id = w.entity_id LIMIT 1
        ) r
        UNION ALL
        SELECT r.entity, r.entity_id, r.version, r.deleted, r.natural_key, r.data, r.changed_at
        FROM unnest(\(naturalKeys.map(\.entity))::text[], \(naturalKeys.map(\.naturalKey))::text[]) AS w (entity, natural_key)
        CROSS JOIN LATERAL (
            SELECT * FROM records r
            WHERE r.user_id = \(userID) AND r.entity = w.entity AND r.natural_key = w.natural_key AND NOT r.deleted LIMIT 1
        ) r
        """
    }

    /// Releases the natural keys of records that held one before the batch and no longer do,
    /// so the uniqueness index never sees two holders while the batch is written. The rows are
    /// found by a probe per key (as `loadQuery`), then updated by their row ids: no join that
    /// statistics could turn into a scan of the user's records. The user's lock keeps them in place.
    private static func release(_ plan: BatchPlanner.BatchPlan, userID: String, db: PostgresConnection, logger: Logger) async throws {
        let keys = plan.releasedNaturalKeys
        guard !keys.isEmpty else { return }
        try await db.query(
            """
            UPDATE records SET natural_key = NULL WHERE ctid = ANY (ARRAY(
                SELECT r.ctid FROM unnest(\(keys.map(\.entity))::text[], \(keys.map(\.entityID))::text[]) AS w (entity, entity_id)
                CROSS JOIN LATERAL (
                    SELECT ctid FROM records r WHERE r.user_id = \(userID) AND r.entity = w.entity AND r.entity_id = w.entity_id LIMIT 1
                ) r
            ))
            """,
            logger: logger
        )
    }

    /// The statement writing a batch's final record states at the positions after `position`,
    /// in order of last change, and moving the user's position past them.
    private static func write(_ writes: [StoredRecord], after position: Int64, userID: String, epoch: Int64) -> PostgresQuery {
        // Every state a push writes, its pushing client's mutations wrote (`BatchPlanner`).
        let writer = writes.first?.writtenBy ?? ""
        // Arrays cannot hold NULLs through PostgresNIO's encoders: a flag beside each nullable column.
        let seqs = (0..<Int64(writes.count)).map { position + 1 + $0 }
        return """
            WITH moved AS (
                UPDATE user_changes SET position = \(position + Int64(writes.count)), epoch = \(epoch),
                    epoch_base = CASE WHEN epoch = \(epoch) THEN epoch_base ELSE position END
                WHERE user_id = \(userID)
            )
            INSERT INTO records
                (user_id, entity, entity_id, version, deleted, natural_key, data, seq, changed_at, written_by, written_mutation, written_seq,
                written_at)
            SELECT \(userID), w.entity, w.entity_id, w.version, w.deleted,
                CASE WHEN w.has_key THEN w.natural_key END, CASE WHEN w.has_data THEN w.data END, w.seq,
                w.changed_at, \(writer), w.written_mutation, w.seq, \(serverMilliseconds())
            FROM unnest(
                \(writes.map(\.entity))::text[], \(writes.map(\.entityID))::text[], \(writes.map(\.version))::int8[],
                \(writes.map(\.deleted))::bool[], \(writes.map { $0.naturalKey != nil })::bool[], \(writes.map { $0.naturalKey ?? "" })::text[],
                \(writes.map { $0.data != nil })::bool[], \(writes.map { ByteBuffer(bytes: $0.data ?? Data()) })::bytea[], \(seqs)::int8[],
                \(writes.map { $0.changedAt ?? 0 })::int8[], \(writes.map { $0.writtenMutation ?? 0 })::int8[]
            ) AS w (entity, entity_id, version, deleted, has_key, natural_key, has_data, data, seq, changed_at, written_mutation)
            ON CONFLICT (user_id, entity, entity_id) DO UPDATE SET
                version = excluded.version, deleted = excluded.deleted, natural_key = excluded.natural_key,
                data = excluded.data, seq = excluded.seq, changed_at = excluded.changed_at,
                written_by = excluded.written_by, written_mutation = excluded.written_mutation, written_seq = excluded.written_seq,
                written_at = excluded.written_at
            """
    }

    // MARK: - Pull

    /// Reads up to `limit` records changed after `cursor`, leaving out `ownWrites` and stopping
    /// at the page's data budget (`PullPage.Builder`): the personal history in one statement (one
    /// snapshot), then, for a user in spaces, the memberships with the spaces' heads and each
    /// space with something to read while the page has room (`SpacedPage`), all in one
    /// `REPEATABLE READ` transaction: the memberships the page reports and the rows it returns
    /// are one view, so a member removed and the space written while the pull reads is never
    /// sent what was written after the removal. Each space's changes commit in order of position
    /// (its change lock), so what the snapshot holds of a space is all of it up to its last row.
    /// Throws `ProtocolViolation` (`invalid_cursor`) for a cursor this database did not issue for `userID`.
    public func pull(userID: String, cursor: String?, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage {
        let from = try cursor.map { cursor throws(ProtocolViolation) in try cursors.decodePosition(cursor, userID: userID) }
        let scan = PullPage.scanLimit(limit, leavingOut: ownWrites)
        if let from, let page = try await continuing(from, userID: userID, limit: limit, ownWrites: ownWrites) { return page }
        return try await withDatabase { [self] db in
            let first = try await Self.rows(
                of: Self.pullQuery(userID: userID, cursor: from?.personal, naming: ownWrites, scan: scan, entries: from?.spaces ?? [:]),
                on: db,
                logger: logger
            )
            var personal = PullPage.Builder(after: from?.personal.position ?? 0, limit: limit, leavingOut: ownWrites)
            Self.offer(first.rows, to: &personal)
            // The head was read in the statement's snapshot, with the rows: a cursor it refuses
            // is refused before any of them is sent.
            let start = try first.head.start(from: from?.personal, naming: ownWrites)
            let page = SpacedPage(
                from: from,
                personal: personal,
                head: first.head,
                start: start,
                limit: limit,
                ownWrites: ownWrites,
                userID: userID
            )
            // The statement also said whether any space needs a look (`pullQuery`'s `entries`).
            if first.version == (from?.memberships ?? 0), first.spaces == (from?.spaces.count ?? 0), first.moved == 0 {
                return page.pageWithSpacesUnchanged(cursors: cursors, cursor: cursor)
            }
            return try await Self.snapshot(db, logger: logger) { db in
                try await readSpaces(page, version: first.version, userID: userID, ownWrites: ownWrites, db: db)
            }
        }
    }

    /// The rest of a page after the personal history, in the caller's snapshot: the spaces the
    /// user reads, then each, in order of key, then the ids of those the cursor named that the
    /// user reads no more.
    private func readSpaces(
        _ page: SpacedPage,
        version: Int64,
        userID: String,
        ownWrites: OwnWrites?,
        db: PostgresConnection
    ) async throws -> PullPage {
        var page = page
        let spaces = try await Self.readableSpaces(of: userID, on: db, logger: logger)
        await interleaving.reachedAsync()
        // The spaces with something to read are read in one statement (a new member of 1,000
        // spaces paid a statement, a round trip, for each); a space that statement may have cut
        // short (it read as many rows as the page may scan) is read again on its own.
        var probe = page
        var reading: [(space: ReadableSpace, start: PullCursor)] = []
        for space in spaces {
            let start = try probe.start(of: space)
            if probe.needsRead(space, from: start) { reading.append((space, start)) }
        }
        var batched: [Int64: [PulledRow]] = [:]
        var cutFrom: Int?
        if reading.count > 1, let (first, start) = reading.first {
            let builder = page.builder(for: first, from: start)
            let scan = PullPage.scanLimit(builder.limit, leavingOut: ownWrites)
            let rows = try await Self.spacesRows(
                of: Self.spacesQuery(reading.map { ($0.space.key, $0.start) }, scan: scan, budget: builder.budget, takesFirst: builder.takesFirst),
                on: db,
                logger: logger
            )
            for (key, row) in rows { batched[key, default: []].append(row) }
            if rows.count >= scan, let last = rows.last?.key { cutFrom = reading.firstIndex { $0.space.key == last } }
        }
        let order = Dictionary(uniqueKeysWithValues: reading.enumerated().map { ($1.space.key, $0) })
        for space in spaces {
            let start = try page.start(of: space)
            guard page.needsRead(space, from: start) else { continue }
            var builder = page.builder(for: space, from: start)
            if reading.count > 1, let index = order[space.key], index < (cutFrom ?? reading.count) {
                Self.offer(batched[space.key] ?? [], to: &builder)
                page.add(builder, of: space, from: start)
                continue
            }
            let readHistory = try await Self.rows(
                of: Self.pullQuery(
                    userID: userID,
                    partition: SpacePartition.name(space.key),
                    cursor: start,
                    scan: PullPage.scanLimit(builder.limit, leavingOut: ownWrites),
                    budget: builder.budget,
                    takesFirst: builder.takesFirst
                ),
                on: db,
                logger: logger
            )
            Self.offer(readHistory.rows, to: &builder)
            var read = space
            read.head = readHistory.head
            page.add(builder, of: read, from: start)
        }
        let revokedKeys = page.revoked(readable: spaces)
        var revoked: [String] = []
        if !revokedKeys.isEmpty {
            for try await id in try await db.query("SELECT id FROM spaces WHERE key = ANY(\(revokedKeys)::int8[]) ORDER BY id", logger: logger)
                .decode(String.self)
            {
                revoked.append(id)
            }
        }
        return page.page(cursors: cursors, spaces: spaces, version: version, revoked: revoked)
    }

    /// The rows after each of `spaces`' positions, in one statement: space by space in the
    /// order given, each in change order, `scan` rows in all at most, and of those only up to the
    /// first whose data passes `budget` (`pullQuery` reads one history so). Each row comes with
    /// its space's key.
    static func spacesQuery(_ spaces: [(key: Int64, start: PullCursor)], scan: Int, budget: Int, takesFirst: Bool) -> PostgresQuery {
        let keys = spaces.map { String($0.key) }.joined(separator: ",")
        let afters = spaces.map { String($0.start.position) }.joined(separator: ",")
        let horizons = spaces.map { String($0.start.horizon) }.joined(separator: ",")
        return """
            SELECT p.key, p.entity, p.entity_id, p.version, p.deleted, p.natural_key, CASE WHEN p.fits THEN p.data END, p.seq, p.changed_at,
                p.written_by, p.written_mutation, p.written_seq, p.size, p.fits
            FROM (
                SELECT *, running <= \(budget) OR (\(takesFirst) AND running = size) AS fits FROM (
                    SELECT c.key, r.*, coalesce(octet_length(r.data), 0) AS size,
                        sum(coalesce(octet_length(r.data), 0)) OVER (ORDER BY c.ord, r.seq ROWS UNBOUNDED PRECEDING) AS running
                    FROM unnest('{\(unescaped: keys)}'::int8[], '{\(unescaped: afters)}'::int8[], '{\(unescaped: horizons)}'::int8[])
                        WITH ORDINALITY AS c (key, after, horizon, ord)
                    CROSS JOIN LATERAL (
                        SELECT entity, entity_id, version, deleted, natural_key, data, seq, changed_at, written_by, written_mutation, written_seq
                        FROM records
                        WHERE user_id = (chr(1) || c.key::text) COLLATE "C" AND seq > c.after AND NOT (deleted AND seq <= c.horizon)
                        ORDER BY seq LIMIT \(scan)
                    ) r
                    ORDER BY c.ord, r.seq LIMIT \(scan)
                ) scanned
                WHERE running - size <= \(budget)
            ) p
            ORDER BY p.running
            """
    }

    /// Runs a `spacesQuery`: its rows in order, each with its space's key.
    private static func spacesRows(of query: PostgresQuery, on db: PostgresConnection, logger: Logger) async throws -> [(key: Int64, row: PulledRow)]
    {
        var rows: [(key: Int64, row: PulledRow)] = []
        for try await row in try await db.query(query, logger: logger) {
            let (key, entity, entityID, version, deleted, naturalKey, data, seq, changedAt, writtenBy, writtenMutation, writtenSeq, size, fits) =
                try row.decode((Int64, String, String, Int64, Bool, String?, ByteBuffer?, Int64, Int64?, String?, Int64?, Int64?, Int, Bool).self)
            let record = StoredRecord(
                entity: entity,
                entityID: entityID,
                version: version,
                deleted: deleted,
                naturalKey: naturalKey,
                changedAt: changedAt,
                writtenBy: writtenBy,
                writtenMutation: writtenMutation,
                writtenSeq: writtenSeq
            )
            rows.append((key, (record, seq, size, fits, data)))
        }
        return rows
    }

    /// `body` in a read-only `REPEATABLE READ` transaction on `connection`: every statement of
    /// it reads the snapshot its first statement took.
    static func snapshot<T: Sendable>(
        _ connection: PostgresConnection,
        logger: Logger,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await connection.query("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
        let value: T
        do {
            value = try await body(connection)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        try await connection.query("COMMIT", logger: logger)
        return value
    }

    /// A space's first download one statement a page: when the cursor stopped in a space
    /// (`PullPosition.continuing`), one statement reads on in it, with the memberships' version
    /// and whether the user still reads it. `nil` when the memberships changed, or the space's
    /// read reached its end: the page is then read as any other, the personal history first.
    private func continuing(_ from: PullPosition, userID: String, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage? {
        guard let key = from.continuing, let entry = from.spaces[key] else { return nil }
        let partition = SpacePartition.name(key)
        let query = Self.pullQuery(
            userID: userID,
            partition: partition,
            cursor: entry,
            scan: PullPage.scanLimit(limit, leavingOut: ownWrites),
            member: key
        )
        let read = try await withDatabase { [logger] db in try await Self.rows(of: query, on: db, logger: logger) }
        guard read.version == from.memberships, let id = read.member else { return nil }
        let space = ReadableSpace(key: key, id: id, role: .read, head: read.head, last: read.head.position)
        let start = try space.head.start(from: entry)
        var builder = PullPage.Builder(
            after: start.position,
            limit: limit,
            leavingOut: SpacedPage.leavesOut(ownWrites, joining: entry, userID: userID),
            space: id
        )
        Self.offer(read.rows, to: &builder)
        guard builder.stopped else { return nil }
        return SpacedPage.continuing(from: from, in: space, read: builder, start: start, userID: userID, cursors: cursors)
    }

    /// A row of a pull statement: a record, its position and size, and whether it fits the page.
    private typealias PulledRow = (record: StoredRecord, seq: Int64, size: Int, fits: Bool, data: ByteBuffer?)

    /// What a `pullQuery` read: the head of the history, the user's memberships' version and
    /// count, how many of the cursor's space entries moved, and the rows.
    private struct PulledHistory: Sendable {
        var head = ChangeHead()
        var version: Int64 = 0
        var spaces = 0
        var moved = 0
        /// With `pullQuery`'s `member`: the space's id if the user still reads it.
        var member: String?
        var rows: [PulledRow] = []
    }

    /// Runs a `pullQuery` on `db`.
    private static func rows(of query: PostgresQuery, on db: PostgresConnection, logger: Logger) async throws -> PulledHistory {
        var pulled = PulledHistory()
        for try await row in try await db.query(query, logger: logger) {
            let (
                position, epoch, epochBase, purgedThrough, lastMutationID, memberships, spaceCount, moved, member, entity, entityID, version,
                deleted, naturalKey, data, seq, changedAt, writtenBy, writtenMutation, writtenSeq, size, fits
            ) = try row.decode(
                (
                    Int64, Int64, Int64, Int64, Int64?, Int64?, Int, Int, String?, String?, String?, Int64?, Bool?, String?, ByteBuffer?, Int64?,
                    Int64?, String?, Int64?, Int64?, Int?, Bool?
                ).self
            )
            pulled.member = member
            pulled.head = ChangeHead(
                position: position,
                epoch: epoch,
                epochBase: epochBase,
                purgedThrough: purgedThrough,
                lastMutationID: lastMutationID ?? 0
            )
            (pulled.version, pulled.spaces, pulled.moved) = (memberships ?? 0, spaceCount, moved)
            // The head alone: no change after the cursor.
            guard let entity, let entityID, let version, let deleted, let seq, let size, let fits else { break }
            let record = StoredRecord(
                entity: entity,
                entityID: entityID,
                version: version,
                deleted: deleted,
                naturalKey: naturalKey,
                changedAt: changedAt,
                writtenBy: writtenBy,
                writtenMutation: writtenMutation,
                writtenSeq: writtenSeq
            )
            pulled.rows.append((record, seq, size, fits, data))
        }
        return pulled
    }

    /// Offers a statement's rows to `builder` in change order: the statement has no ORDER BY of
    /// its own (it would sort the page's data), and the window already decided which rows fit in
    /// that order. It sends no row past the first that passes the budget, and that one without its data.
    private static func offer(_ rows: [PulledRow], to builder: inout PullPage.Builder) {
        for row in rows.sorted(by: { $0.seq < $1.seq }) {
            guard builder.offer(row.record, seq: row.seq, size: row.size, fits: row.fits, data: { row.data.map { Data($0.readableBytesView) } })
            else { break }
        }
    }

    /// The spaces `userID` reads, in order of key, with the heads of their histories.
    private static func readableSpaces(of userID: String, on db: PostgresConnection, logger: Logger) async throws -> [ReadableSpace] {
        var spaces: [ReadableSpace] = []
        for try await (key, id, role, position, epoch, epochBase, purgedThrough) in try await db.query(
            """
            SELECT m.space_key, s.id, m.role, coalesce(h.position, 0), coalesce(h.epoch, 0), coalesce(h.epoch_base, 0),
                coalesce(h.purged_through, 0)
            FROM space_members m JOIN spaces s ON s.key = m.space_key
            LEFT JOIN user_changes h ON h.user_id = (chr(1) || m.space_key::text) COLLATE "C"
            WHERE m.user_id = \(userID) ORDER BY m.space_key
            """,
            logger: logger
        ).decode((Int64, String, String, Int64, Int64, Int64, Int64).self) {
            let head = ChangeHead(position: position, epoch: epoch, epochBase: epochBase, purgedThrough: purgedThrough)
            spaces.append(ReadableSpace(key: key, id: id, role: SpaceRole(rawValue: role) ?? .read, head: head, last: position))
        }
        return spaces
    }

    /// A pull page's statement over one history (the user's, or a space's `partition`), one
    /// snapshot: its `ChangeHead` and how many spaces the user is in, then the rows after the
    /// cursor in change order (tombstones up to its horizon left out; a pull from scratch naming
    /// no writes of its own has the head as its horizon), walking `records_pull` and stopping at
    /// `scan` rows, and of those only up to the first whose data passes `budget` (sent without its
    /// data, `fits` false; with `takesFirst`, the first row fits whatever its size). The running
    /// total reads each row's size from its header, not its data, so rows past the budget cost an
    /// index entry and a heap tuple. A history with no change after the cursor has the head
    /// alone (zeros for one never written). Rows come in the order the index walk reads them;
    /// the caller sorts them by `seq` all the same.
    ///
    /// With the history it gives the version and count of the user's memberships, and how many of
    /// the cursor's space `entries` moved (their space's position, epoch or purge horizon is not
    /// what the entry saw): when none did and the memberships are the cursor's, no space needs a
    /// look, and an empty pull is this one statement however many spaces the user is in.
    static func pullQuery(
        userID: String,
        partition: String? = nil,
        cursor: PullCursor?,
        naming ownWrites: OwnWrites? = nil,
        scan: Int,
        budget: Int = ProtocolLimits.maxPullPageDataBytes,
        takesFirst: Bool = true,
        entries: [Int64: PullCursor] = [:],
        member space: Int64? = nil
    ) -> PostgresQuery {
        let partition = partition ?? userID
        let after = cursor?.position ?? 0
        // `nil`: the head (`ChangeHead.start(from:naming:)`).
        let horizon = cursor?.horizon ?? (ownWrites == nil ? nil : 0)
        return """
            SELECT coalesce(u.position, 0), coalesce(u.epoch, 0), coalesce(u.epoch_base, 0), coalesce(u.purged_through, 0),
                (SELECT last_mutation_id FROM clients WHERE user_id = \(userID) AND client_id = \(ownWrites?.clientID)),
                (SELECT version FROM member_versions WHERE user_id = \(userID)),
                (SELECT count(*)::int8 FROM space_members WHERE user_id = \(userID)),
                \(unescaped: Self.movedEntries(entries)),
                (SELECT s.id FROM spaces s JOIN space_members m ON m.space_key = s.key AND m.user_id = \(userID)
                    WHERE s.key = \(unescaped: space.map(String.init) ?? "NULL") AND NOT s.deleted),
                p.entity, p.entity_id, p.version, p.deleted, p.natural_key, CASE WHEN p.fits THEN p.data END, p.seq, p.changed_at,
                p.written_by, p.written_mutation, p.written_seq, p.size, p.fits
            FROM (SELECT 1) one
            LEFT JOIN user_changes u ON u.user_id = \(partition)
            LEFT JOIN LATERAL (
                SELECT *, running <= \(budget) OR (\(takesFirst) AND running = size) AS fits FROM (
                    SELECT entity, entity_id, version, deleted, natural_key, data, seq, changed_at, written_by, written_mutation,
                        written_seq, coalesce(octet_length(data), 0) AS size,
                        sum(coalesce(octet_length(data), 0)) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS running
                    FROM records
                    WHERE user_id = \(partition) AND seq > \(after) AND NOT (deleted AND seq <= coalesce(\(horizon), u.position))
                    ORDER BY seq LIMIT \(scan)
                ) scanned
                WHERE running - size <= \(budget)
            ) p ON u.position IS NOT NULL
            """
    }

    /// `pullQuery`'s count of the cursor's space entries that moved, as SQL: the entries are
    /// numbers, written into it as literals, so that a pull naming no space plans no more than
    /// it did before spaces (every pull statement is planned again: PostgresNIO sends it unnamed).
    static func movedEntries(_ entries: [Int64: PullCursor]) -> String {
        guard !entries.isEmpty else { return "0::int8" }
        let (keys, positions, epochs) = (
            entries.keys.map(String.init).joined(separator: ","), entries.values.map { String($0.position) }.joined(separator: ","),
            entries.values.map { String($0.epoch) }.joined(separator: ",")
        )
        return """
            (SELECT count(*)::int8 FROM unnest('{\(keys)}'::int8[], '{\(positions)}'::int8[], '{\(epochs)}'::int8[]) AS c (key, position, epoch)
                LEFT JOIN user_changes h ON h.user_id = (chr(1) || c.key::text) COLLATE "C"
                WHERE coalesce(h.position, 0) <> c.position OR coalesce(h.epoch, 0) <> c.epoch OR coalesce(h.purged_through, 0) > c.position)
            """
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
                return report
            }
        }
        if report.tombstones > 0 || report.clients > 0 {
            // Statistics follow what the purge changed (plans do not depend on them: `planSettings`).
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
    /// per node), for tests and diagnostics.
    package func plan(of query: PostgresQuery) async throws -> String {
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
        return try await withDatabase { [logger] db in
            var lines: [String] = []
            for try await line in try await db.query(explain, logger: logger).decode(String.self) { lines.append(line) }
            return lines.joined(separator: "\n")
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
