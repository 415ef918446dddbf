import FerryProtocol
import Foundation
import GRDB

/// A push on SQLite: one write transaction, as `PushDriver` asks, its records loaded, planned
/// (`BatchPlanner`) and written, its results kept, and what it changed announced once committed.
extension SQLiteSyncStorage {
    /// Applies the batch in one write transaction, committed with `synchronous = FULL` before it returns.
    public func push(caller: Caller, clientID: String, mutations: [IncomingMutation], rules: ServerRules) async throws -> PushResponse {
        let (response, signals) = try await pushes.run(for: caller.userID) {
            try await self.write(mutations, caller: caller, clientID: clientID, rules: rules)
        }
        // Committed: the streams of this process, the only one on the file, hear of it.
        changes.announce(signals)
        return response
    }

    /// The push's transaction; returns its answer and what it changed, for the event streams.
    private func write(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        rules: ServerRules
    ) async throws -> (PushResponse, [ChangeSignal]) {
        let epoch = epoch
        // One mutation at a time (`applyOneByOne`) when a write broke a constraint: the planner
        // should make that impossible; if a rule was missed, the batch (rolled back whole) still
        // gets one result per mutation instead of a 500.
        let attempt = { (oneByOne: Bool) in
            try await self.writer.write { db in
                try Self.push(mutations, caller: caller, clientID: clientID, rules: rules, oneByOne: oneByOne, epoch: epoch, db: db)
            }
        }
        return try await mapErrors {
            do {
                return try await attempt(false)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                return try await attempt(true)
            }
        }
    }

    /// One push's transaction, as `PushDriver` asks: the single writer keeps it from any other
    /// push and any membership change, so it needs no lock of its own; what it changed is
    /// announced after the commit.
    private static func push(
        _ mutations: [IncomingMutation],
        caller: Caller,
        clientID: String,
        rules: ServerRules,
        oneByOne: Bool,
        epoch: Int64,
        db: Database
    ) throws -> (PushResponse, [ChangeSignal]) {
        let userID = caller.userID
        var driver = PushDriver(mutations, caller: caller, clientID: clientID, locksSpaces: false)
        var signals: [ChangeSignal] = []
        while let need = driver.next() {
            switch need {
            case .client:
                let client = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT last_mutation_id, pushes FROM clients WHERE user_id = ? AND client_id = ?"),
                    arguments: [userID, clientID]
                )
                driver.client(client.map { ($0[0], $0[1]) })
            case .clientCount:
                try driver.admit(
                    existingClients: try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM clients WHERE user_id = ?"), arguments: [userID])
                        ?? 0
                )
            case .keptResults(let newerSlot):
                try driver.replay(
                    try Data.fetchAll(
                        db.cachedStatement(sql: "SELECT results FROM client_results WHERE user_id = ? AND client_id = ? ORDER BY slot = ?"),
                        arguments: [userID, clientID, newerSlot]
                    )
                )
            case .spaces(let ids):
                driver.spaces(try targets(ids, caller: caller, db: db))
            case .lockSpaces:
                driver.spacesLocked()  // the single writer holds every space already
            case .readableAttachments(let digests):
                driver.readableAttachments(try readableAttachments(digests, by: caller, db: db))
            case .currentRecords(let refusals):
                driver.currentRecords(try refusals.map { try record($0.partition, $0.record, db: db) ?? .absent })
            case .apply(let groups):
                let judge = rules.isEmpty ? nil : RuleJudge(rules: rules, caller: caller, clientID: clientID, roles: driver.roles)
                driver.applied(
                    try groups.map { group in
                        try apply(
                            group,
                            oneByOne: oneByOne,
                            lastMutationID: driver.lastMutationID,
                            replays: driver.replays,
                            judge: judge,
                            epoch: epoch,
                            db: db
                        )
                    }
                )
            case .announce(let changed):
                signals = changed  // by the caller, once committed
                driver.announced()
            case .keep(let keeping):
                try keep(keeping, userID: userID, clientID: clientID, db: db)
                driver.kept()
            }
        }
        return (driver.response, signals)
    }

    /// One history's mutations, all at once or, with `oneByOne`, each in a savepoint.
    private static func apply(
        _ group: SpacedBatch.Group,
        oneByOne: Bool,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        judge: RuleJudge?,
        epoch: Int64,
        db: Database
    ) throws -> PushResponse {
        oneByOne
            ? try applyOneByOne(group, lastMutationID: lastMutationID, replays: replays, judge: judge, epoch: epoch, db: db)
            : try apply(
                group.mutations,
                clientID: group.writer,
                lastMutationID: lastMutationID,
                replays: replays,
                judge: judge,
                userID: group.partition,
                epoch: epoch,
                db: db
            ).response
    }

    /// Keeps the client's new position and its results.
    private static func keep(_ keeping: PushDriver.Keeping, userID: String, clientID: String, db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO clients (user_id, client_id, last_mutation_id, pushes, last_seen_at) VALUES (?, ?, ?, 1, ?)
                ON CONFLICT (user_id, client_id) DO UPDATE SET last_mutation_id = excluded.last_mutation_id, pushes = clients.pushes + 1,
                    last_seen_at = excluded.last_seen_at
                """
        ).execute(arguments: [userID, clientID, keeping.lastMutationID, serverMilliseconds()])
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO client_results (user_id, client_id, slot, results) VALUES (?, ?, ?, ?)")
            .execute(arguments: [userID, clientID, keeping.slot, keeping.results])
    }

    /// The live spaces of `ids`, by id, with the caller's role in each.
    private static func targets(_ ids: [String], caller: Caller, db: Database) throws -> [String: SpacedBatch.Target] {
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT s.id, s.key, m.role FROM spaces s LEFT JOIN space_members m ON m.space_key = s.key AND m.user_id = ?
                WHERE s.deleted = 0 AND s.id IN (SELECT value FROM json_each(?))
                """,
            arguments: [caller.userID, String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)]
        )
        var targets: [String: SpacedBatch.Target] = [:]
        for row in rows { targets[row[0]] = SpacedBatch.Target(key: row[1], role: (row[2] as String?).flatMap(SpaceRole.init(rawValue:))) }
        return targets
    }

    /// The record of `partition` as it is now; `nil` when it never existed.
    private static func record(_ partition: String, _ record: RecordRef, db: Database) throws -> RecordState? {
        let row = try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT version, deleted, natural_key, data, changed_at FROM records WHERE user_id = ? AND entity = ? AND entity_id = ?"
            ),
            arguments: [partition, record.entity, record.entityID]
        )
        return try row.map {
            try StoredRecord(
                entity: record.entity,
                entityID: record.entityID,
                version: $0[0],
                deleted: $0[1],
                naturalKey: $0[2],
                data: $0[3],
                changedAt: $0[4]
            ).state()
        }
    }

    /// Loads what a batch touches, decides every result and writes the records.
    private static func apply(
        _ mutations: [IncomingMutation],
        clientID: String,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        judge: RuleJudge?,
        userID: String,
        epoch: Int64,
        db: Database
    ) throws -> BatchPlanner.BatchPlan {
        let loaded = try load(BatchPlanner.lookups(for: mutations, replays: replays, judge: judge), userID: userID, db: db)
        var planner = BatchPlanner(
            clientID: clientID,
            lastMutationID: lastMutationID,
            replays: replays,
            loaded: loaded,
            judge: judge
        )
        let plan = try planner.plan(mutations)
        try write(plan, userID: userID, epoch: epoch, db: db)
        return plan
    }

    /// The batch again, one mutation per savepoint: a mutation whose write breaks a constraint
    /// is `rejected` with the database's reason, and the others are applied as usual.
    private static func applyOneByOne(
        _ group: SpacedBatch.Group,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        judge: RuleJudge?,
        epoch: Int64,
        db: Database
    ) throws -> PushResponse {
        let (clientID, userID) = (group.writer, group.partition)
        var last = lastMutationID
        var results: [PushResult] = []
        for incoming in group.mutations {
            let id = incoming.mutation.id
            let result: PushResult
            do {
                result = try inSavepoint(db) {
                    try apply(
                        [incoming],
                        clientID: clientID,
                        lastMutationID: last,
                        replays: replays,
                        judge: judge,
                        userID: userID,
                        epoch: epoch,
                        db: db
                    )
                    .response.results[0]
                }
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                result = PushDriver.refusedByDatabase(incoming, reason: error.message)
            }
            last = max(last, id)
            results.append(result)
        }
        return PushResponse(lastMutationID: last, results: results)
    }

    /// `body` in a savepoint: rolled back alone if it throws, the transaction goes on.
    private static func inSavepoint<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        var value: T?
        try db.inSavepoint {
            value = try body()
            return .commit
        }
        return value!  // set: `inSavepoint` returned without an error, so `body` ran to the end
    }
}
