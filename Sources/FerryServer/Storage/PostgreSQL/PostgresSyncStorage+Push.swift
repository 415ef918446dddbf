import FerryProtocol
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PostgresNIO

/// A push on PostgreSQL: the user's change lock, the batch's records loaded, planned (`BatchPlanner`), written, and its results kept.
extension PostgresSyncStorage {
    /// Applies the batch in one transaction that holds the user's change-position lock, as the overview describes.
    /// Throws ``StorageError`` when no connection is available within the deadline.
    public func push(caller: Caller, clientID: String, mutations: [IncomingMutation], rules: ServerRules) async throws -> PushResponse {
        try await withDatabase(queueingFor: caller.userID) { [logger, epoch] db in
            try await Self.push(mutations, caller: caller, clientID: clientID, rules: rules, epoch: epoch, db: db, logger: logger)
        }
    }

    /// A push's transaction, and again one mutation at a time if the database refused a write.
    static func push(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        rules: ServerRules = ServerRules(),
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        do {
            return try await Self.transaction(db, logger: logger) { db in
                try await Self.push(
                    mutations,
                    caller: caller,
                    clientID: clientID,
                    rules: rules,
                    oneByOne: false,
                    epoch: epoch,
                    db: db,
                    logger: logger
                )
            }
        } catch let error as PSQLError where error.isRefusedWrite {
            // The planner should make this impossible; if a rule was missed, the batch
            // (rolled back whole) still gets one result per mutation instead of a 500.
            return try await Self.transaction(db, logger: logger) { db in
                try await Self.push(mutations, caller: caller, clientID: clientID, rules: rules, oneByOne: true, epoch: epoch, db: db, logger: logger)
            }
        }
    }

    /// One push's transaction, as `PushDriver` asks: the user's change lock and the client's row
    /// first, each writable space's lock before the batch is judged, the referenced attachments'
    /// shared locks before their readability, and what changed announced inside the transaction
    /// (PostgreSQL delivers it to every process at the commit, and never without it). Seven round
    /// trips, whatever the batch's size: a round trip is most of a push's cost.
    static func push(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        rules: ServerRules,
        oneByOne: Bool,
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        let userID = caller.userID
        var driver = PushDriver(mutations, caller: caller, clientID: clientID, locksSpaces: true)
        // The change position of each partition whose lock the push holds.
        var positions: [String: Int64] = [:]
        while let need = driver.next() {
            switch need {
            case .client:
                let (position, client) = try await lock(userID, clientID: clientID, db: db, logger: logger)
                positions[userID] = position
                driver.client(client)
            case .clientCount:
                for try await count in try await db.query("SELECT count(*) FROM clients WHERE user_id = \(userID)", logger: logger).decode(Int.self) {
                    try driver.admit(existingClients: count)
                }
            case .keptResults(let newerSlot):
                var kept: [Data] = []
                for try await results in try await db.query(
                    "SELECT results FROM client_results WHERE user_id = \(userID) AND client_id = \(clientID) ORDER BY slot = \(Int(newerSlot))",
                    logger: logger
                ).decode(ByteBuffer.self) {
                    kept.append(Data(results.readableBytesView))
                }
                try driver.replay(kept)
            case .spaces(let ids):
                driver.spaces(try await targets(ids, caller: caller, db: db, logger: logger))
            case .lockSpaces(let keys):
                // In order of key after the user's: no two pushes wait for each other in a cycle.
                for key in keys {
                    positions[SpacePartition.name(key)] = try await lockChanges(of: SpacePartition.name(key), db: db, logger: logger)
                }
                driver.spacesLocked()
            case .readableAttachments(let digests):
                try await lockAttachments(digests, exclusively: false, db: db, logger: logger)
                driver.readableAttachments(try await readableAttachments(digests, by: caller, db: db, logger: logger))
            case .currentRecords(let refusals):
                var states: [RecordState] = []
                for refusal in refusals { states.append(try await record(refusal.partition, refusal.record, db: db, logger: logger) ?? .absent) }
                driver.currentRecords(states)
            case .apply(let groups):
                let judge = rules.isEmpty ? nil : RuleJudge(rules: rules, caller: caller, clientID: clientID, roles: driver.roles)
                var responses: [PushResponse] = []
                for group in groups {
                    guard let position = positions[group.partition] else { throw StorageError.corrupt("a space written without its lock") }
                    responses.append(
                        try await apply(
                            group,
                            after: position,
                            oneByOne: oneByOne,
                            lastMutationID: driver.lastMutationID,
                            replays: driver.replays,
                            judge: judge,
                            epoch: epoch,
                            db: db,
                            logger: logger
                        )
                    )
                }
                driver.applied(responses)
            case .announce(let signals):
                try await notify(signals, db: db, logger: logger)
                driver.announced()
            case .keep(let keeping):
                try await keep(keeping, userID: userID, clientID: clientID, db: db, logger: logger)
                driver.kept()
            }
        }
        return driver.response
    }

    /// Keeps the client's new position and its results, in one statement.
    private static func keep(_ keeping: PushDriver.Keeping, userID: String, clientID: String, db: PostgresConnection, logger: Logger) async throws {
        try await db.query(
            """
            WITH client AS (
                INSERT INTO clients (user_id, client_id, last_mutation_id, pushes, last_seen_at)
                VALUES (\(userID), \(clientID), \(keeping.lastMutationID), 1, \(serverMilliseconds()))
                ON CONFLICT (user_id, client_id) DO UPDATE SET last_mutation_id = excluded.last_mutation_id, pushes = clients.pushes + 1,
                    last_seen_at = excluded.last_seen_at
            )
            INSERT INTO client_results (user_id, client_id, slot, results)
            VALUES (\(userID), \(clientID), \(Int(keeping.slot)), \(ByteBuffer(data: keeping.results)))
            ON CONFLICT (user_id, client_id, slot) DO UPDATE SET results = excluded.results
            """,
            logger: logger
        )
    }

    /// A refused record the caller may read, as it is now.
    /// The record of `partition` as it is now; `nil` when it never existed.
    private static func record(_ partition: String, _ record: RecordRef, db: PostgresConnection, logger: Logger) async throws -> RecordState? {
        for try await (version, deleted, naturalKey, data, changedAt) in try await db.query(
            """
            SELECT version, deleted, natural_key, data, changed_at FROM records
            WHERE user_id = \(partition) AND entity = \(record.entity) AND entity_id = \(record.entityID)
            """,
            logger: logger
        ).decode((Int64, Bool, String?, ByteBuffer?, Int64?).self) {
            return try StoredRecord(
                entity: record.entity,
                entityID: record.entityID,
                version: version,
                deleted: deleted,
                naturalKey: naturalKey,
                data: data.map { Data($0.readableBytesView) },
                changedAt: changedAt
            ).state()
        }
        return nil
    }

    /// The live spaces of `ids`, by id, with the caller's role in each.
    static func targets(
        _ ids: [String],
        caller: Caller,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> [String: SpacedBatch.Target] {
        var targets: [String: SpacedBatch.Target] = [:]
        for try await (id, key, role) in try await db.query(
            """
            SELECT s.id, s.key, m.role FROM spaces s LEFT JOIN space_members m ON m.space_key = s.key AND m.user_id = \(caller.userID)
            WHERE NOT s.deleted AND s.id = ANY(\(ids)::text[])
            """,
            logger: logger
        ).decode((String, Int64, String?).self) {
            targets[id] = SpacedBatch.Target(key: key, role: role.flatMap(SpaceRole.init(rawValue:)))
        }
        return targets
    }

    /// One history's mutations of a push (`SpacedBatch.Group`), written after `position`, all at
    /// once or, with `oneByOne`, each in a savepoint.
    static func apply(
        _ group: SpacedBatch.Group,
        after position: Int64,
        oneByOne: Bool,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        judge: RuleJudge? = nil,
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> PushResponse {
        let (mutations, clientID, userID) = (group.mutations, group.writer, group.partition)
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
                        judge: judge,
                        userID: userID,
                        db: db,
                        logger: logger
                    )
                    try await store(plan, after: position, userID: userID, epoch: epoch, db: db, logger: logger)
                    try await db.query("RELEASE SAVEPOINT mutation", logger: logger)
                    position += Int64(plan.writes.count)
                    results.append(plan.response.results[0])
                } catch let error as PSQLError where error.isRefusedWrite {
                    try await db.query("ROLLBACK TO SAVEPOINT mutation", logger: logger)
                    results.append(PushDriver.refusedByDatabase(incoming, reason: error.serverInfo?[.message]))
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
                judge: judge,
                userID: userID,
                db: db,
                logger: logger
            )
            try await store(plan, after: position, userID: userID, epoch: epoch, db: db, logger: logger)
            response = plan.response
        }
        return response
    }

    /// Writes a plan: releases the natural keys it moves, writes its records after `position`, and
    /// replaces the attachments of the records whose upserts named theirs.
    private static func store(
        _ plan: BatchPlanner.BatchPlan,
        after position: Int64,
        userID: String,
        epoch: Int64,
        db: PostgresConnection,
        logger: Logger
    ) async throws {
        try await release(plan, userID: userID, db: db, logger: logger)
        guard !plan.writes.isEmpty else { return }
        try await write(plan.effects, db: db, logger: logger)
        try await db.query(write(plan.writes, after: position, userID: userID, epoch: epoch), logger: logger)
        if !plan.revivedReferences.isEmpty {
            // Restored records take back the references their deletion released: their last release.
            let revived = plan.revivedReferences
            try await db.query(
                """
                UPDATE attachment_refs a SET released_at = NULL
                FROM (
                    SELECT entity, entity_id, max(released_at) AS last FROM attachment_refs
                    WHERE partition = \(userID)
                        AND (entity, entity_id) IN (SELECT * FROM unnest(\(revived.map(\.entity))::text[], \(revived.map(\.entityID))::text[]))
                    GROUP BY entity, entity_id
                ) r
                WHERE a.partition = \(userID) AND a.entity = r.entity AND a.entity_id = r.entity_id AND a.released_at = r.last
                """,
                logger: logger
            )
        }
        guard !plan.references.isEmpty else { return }
        // What the records named until now is released, not forgotten: readable until the
        // janitor's sweep a day later (`SQLiteSyncStorage.writeReferences`).
        let records = Array(plan.references.keys)
        try await db.query(
            """
            UPDATE attachment_refs SET released_at = \(serverMilliseconds()) WHERE partition = \(userID) AND released_at IS NULL
                AND (entity, entity_id) IN (SELECT * FROM unnest(\(records.map(\.entity))::text[], \(records.map(\.entityID))::text[]))
            """,
            logger: logger
        )
        let rows = records.flatMap { record in plan.references[record]!.map { (record, $0) } }
        guard !rows.isEmpty else { return }
        try await db.query(
            """
            INSERT INTO attachment_refs (partition, entity, entity_id, digest)
            SELECT \(userID), * FROM unnest(\(rows.map(\.0.entity))::text[], \(rows.map(\.0.entityID))::text[], \(rows.map(\.1))::text[])
            ON CONFLICT (partition, entity, entity_id, digest) DO UPDATE SET released_at = NULL
            """,
            logger: logger
        )
    }

    /// Locks the user's change position until the transaction ends; returns it with the
    /// client's `lastMutationID` and count of pushes (`nil`: the server has no row of it).
    ///
    /// The client is read by a statement of its own, after the lock: under READ COMMITTED a
    /// statement that waited for a row lock re-reads that row but not the rows it joined, so a
    /// join would read the client as it was before the push that held the lock, and apply a
    /// resent batch twice.
    static func lock(
        _ userID: String,
        clientID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws
        -> (position: Int64, client: (lastMutationID: Int64, pushes: Int64)?)
    {
        let position = try await lockChanges(of: userID, db: db, logger: logger)
        for try await (last, pushes) in try await db.query(
            "SELECT last_mutation_id, pushes FROM clients WHERE user_id = \(userID) AND client_id = \(clientID)",
            logger: logger
        ).decode((Int64, Int64).self) {
            return (position, (last, pushes))
        }
        return (position, nil)
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
    static func plan(
        _ mutations: [IncomingMutation],
        clientID: String,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        judge: RuleJudge? = nil,
        userID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> BatchPlanner.BatchPlan {
        let loaded = try await load(BatchPlanner.lookups(for: mutations, replays: replays, judge: judge), userID: userID, db: db, logger: logger)
        var planner = BatchPlanner(
            clientID: clientID,
            lastMutationID: lastMutationID,
            replays: replays,
            loaded: loaded,
            judge: judge
        )
        return try planner.plan(mutations)
    }

    /// Every record a batch names by identity and every live holder of its natural keys, in one query.
    static func load(
        _ lookups: BatchPlanner.Lookups,
        userID: String,
        db: PostgresConnection,
        logger: Logger
    ) async throws
        -> [StoredRecord]
    {
        let keys = Array(lookups.keys)
        let naturalKeys = Array(lookups.naturalKeys)
        var found: [RecordRef: StoredRecord] = [:]
        for try await row in try await db.query(loadQuery(keys: keys, naturalKeys: naturalKeys, userID: userID), logger: logger) {
            var columns = ColumnReader(row)  // in the statement's order
            let record = StoredRecord(
                entity: try columns.next(String.self),
                entityID: try columns.next(String.self),
                version: try columns.next(Int64.self),
                deleted: try columns.next(Bool.self),
                naturalKey: try columns.next(String?.self),
                data: try columns.next(ByteBuffer?.self).map { Data($0.readableBytesView) },
                changedAt: try columns.next(Int64?.self)
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
    static func loadQuery(keys: [RecordRef], naturalKeys: [NaturalKeyRef], userID: String) -> PostgresQuery {
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
    static func release(_ plan: BatchPlanner.BatchPlan, userID: String, db: PostgresConnection, logger: Logger) async throws {
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
    static func write(_ writes: [StoredRecord], after position: Int64, userID: String, epoch: Int64) -> PostgresQuery {
        // Every state a push writes, its pushing client's mutations wrote (`BatchPlanner`), but
        // those the app's rules rewrote, which are no client's own (`BatchPlanner.decide`).
        let writer = writes.lazy.compactMap(\.writtenBy).first ?? ""
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
                w.changed_at, CASE WHEN w.has_writer THEN \(writer) END, w.written_mutation, w.seq, \(serverMilliseconds())
            FROM unnest(
                \(writes.map(\.entity))::text[], \(writes.map(\.entityID))::text[], \(writes.map(\.version))::int8[],
                \(writes.map(\.deleted))::bool[], \(writes.map { $0.naturalKey != nil })::bool[], \(writes.map { $0.naturalKey ?? "" })::text[],
                \(writes.map { $0.data != nil })::bool[], \(writes.map { ByteBuffer(bytes: $0.data ?? Data()) })::bytea[], \(seqs)::int8[],
                \(writes.map { $0.changedAt ?? 0 })::int8[], \(writes.map { $0.writtenMutation ?? 0 })::int8[],
                \(writes.map { $0.writtenBy != nil })::bool[]
            ) AS w (entity, entity_id, version, deleted, has_key, natural_key, has_data, data, seq, changed_at, written_mutation, has_writer)
            ON CONFLICT (user_id, entity, entity_id) DO UPDATE SET
                version = excluded.version, deleted = excluded.deleted, natural_key = excluded.natural_key,
                data = excluded.data, seq = excluded.seq, changed_at = excluded.changed_at,
                written_by = excluded.written_by, written_mutation = excluded.written_mutation, written_seq = excluded.written_seq,
                written_at = excluded.written_at
            """
    }
}
