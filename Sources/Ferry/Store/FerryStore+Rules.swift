import FerryProtocol
import FerryRules
import Foundation
import GRDB

extension FerryStore {
    /// Judges a write the app is about to make with the app's rules, against the rows this store
    /// holds: the same `WriteRule` types the server runs, for feedback before the change is even
    /// made (a form's error). The server stays the authority and judges the write again against
    /// what it holds; a rule's "not now" (`RuleUnavailable`) is thrown to the caller.
    ///
    /// - Parameters:
    ///   - rules: the app's rules; those whose `entities` name `entity` judge the write, in order.
    ///   - entity: the record's entity (its table).
    ///   - entityID: the record's id.
    ///   - op: a write (`upsert`, the default) or a delete.
    ///   - data: the record's data as it would be written; `nil` with `op` `delete`.
    ///   - space: the space the record is in, whose role the store knows; `nil` for the user's own.
    ///   - user: the signed-in user, as the server will know them (their tokens' `sub`).
    /// - Returns: what the rules decide, the last rewrite included.
    public func check(
        _ rules: [any WriteRule],
        entity: String,
        entityID: String,
        op: MutationOp = .upsert,
        data: JSONObject?,
        space: String? = nil,
        user: String
    ) async throws -> RuleDecision {
        let judging = rules.filter { $0.entities.contains(entity) }
        guard !judging.isEmpty else { return .accept }
        let clientID = identity.clientID
        return try await database.read { [self] db in
            var write = ProposedWrite(
                entity: entity,
                entityID: entityID,
                op: op,
                data: op == .delete ? nil : (data ?? [:]),
                // As the server holds it: a row it never acknowledged is none of its yet.
                current: try localState(of: RecordRef(entity: entity, entityID: entityID), db: db).flatMap { $0.version > 0 ? $0 : nil },
                space: space,
                role: try space.flatMap { try SpaceMemberships.role(in: $0, db: db) },
                user: user,
                clientID: clientID,
                mutationID: 0
            )
            var decision = RuleDecision.accept
            for rule in judging {
                var reads: [RecordRef: RecordState] = [:]
                for record in rule.reads(for: write) { reads[record] = try localState(of: record, db: db) }
                switch try rule.decide(write, reads: RuleReads(reads)) {
                case .accept: continue
                case .rewrite(let rewritten):
                    write.data = rewritten
                    decision = .rewrite(rewritten)
                case .reject(let rejection): return .reject(rejection)
                }
            }
            return decision
        }
    }

    /// `record` as this store holds it, as a rule reads it; `nil` when no row holds it.
    private func localState(of record: RecordRef, db: Database) throws -> RecordState? {
        guard let table = table(forEntity: record.entity) else { return nil }
        let condition = table.rowCondition(entity: record.entity, entityID: record.entityID)
        let sql =
            "SELECT \(try ChangeCapture.dataSQL(of: table, row: "r", db: db)) FROM \(table.table.quotedDatabaseIdentifier) AS r WHERE \(condition.sql)"
        guard let text = try String.fetchOne(db, sql: sql, arguments: StatementArguments(condition.arguments)),
            case .object(let data) = try? JSONReader.parse(Array(text.utf8))
        else { return nil }
        let version = try KnownVersions.of([record], db: db)[record] ?? 0
        return RecordState(version: version, deleted: false, data: data)
    }
}
