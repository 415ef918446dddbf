import FerryProtocol
import Foundation
import GRDB

/// A join of a space whose rows the store may already hold (written here before the join, or
/// kept from an earlier membership): a join sends no tombstones, so what it did not bring is
/// swept once the pull is caught up, and only what is safe to sweep.
enum SpaceJoins {
    /// Starts the join of `space`, ended once a pull is caught up (`finishJoins`).
    static func begin(_ space: String, db: Database) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO ferry_joins (space) VALUES (?)", arguments: [space])
    }

    /// Whether a join is under way.
    static func anyUnderWay(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ferry_joins)") == true
    }

    /// Forgets everything of `space`'s join (revoked).
    static func forget(_ space: String, db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_joins WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_seen WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_candidates WHERE space = ?", arguments: [space])
    }

    /// Notes the records of spaces being joined that a page brought.
    static func noteJoins(_ changes: [Change], db: Database) throws {
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_joins)")) == true else { return }
        let statement = try db.cachedStatement(
            sql: """
                INSERT OR IGNORE INTO ferry_join_seen (space, entity, entity_id)
                SELECT space, ?2, ?3 FROM ferry_joins WHERE space = ?1
                """
        )
        for change in changes {
            guard let space = change.space else { continue }
            try statement.execute(arguments: [space, change.entity, change.entityID])
        }
    }

    /// Ends the joins of a pull that is caught up: the rows of each joined space that the join
    /// did not bring (deleted by another member before this device joined, whose tombstones a
    /// join does not send) leave the store uncaptured, with their versions. Only the join's
    /// candidates (`noteCandidates`) may leave, and of those not one with changes queued or set
    /// aside as dead letters, nor one whose version the store learned since (a push of this
    /// device answered: the server leaves such writes out of a pull once its cursor has joined
    /// the space). Returns how many left.
    static func finishJoins(store: FerryStore, db: Database) throws -> Int {
        let spaces = try String.fetchAll(db, sql: "SELECT space FROM ferry_joins")
        var writer = RecordWriter(store: store)
        var removed = 0
        for space in spaces {
            let unseen = selections(of: space, in: store).map { selection in
                let table = selection.table
                // Qualified: inside the subqueries an unqualified `id` or `entity` is theirs.
                let quoted = table.table.quotedDatabaseIdentifier
                let entity = table.entityColumn.map { "\(quoted).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral
                let key = "CAST(\(quoted).\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT)"
                return RecordWriter.Selection(
                    table: table,
                    condition: """
                        \(selection.condition) AND EXISTS (SELECT 1 FROM ferry_join_candidates c WHERE c.space = \(space.sqlLiteral)
                            AND c.entity = \(entity) AND c.entity_id = \(key)
                            AND c.version IS \(KnownVersions.versionSQL(entity: "c.entity", entityID: "c.entity_id")))
                        AND NOT EXISTS (SELECT 1 FROM ferry_join_seen s WHERE s.space = \(space.sqlLiteral)
                            AND s.entity = \(entity) AND s.entity_id = \(key))
                        AND NOT \(OutboxTable.hasChangesCondition(entity: entity, key: key))
                        """,
                    arguments: selection.arguments
                )
            }
            removed += try FerryStore.withoutCapture(db) { try writer.remove(unseen, db: db) }.total
        }
        try db.execute(sql: "DELETE FROM ferry_join_seen")
        try db.execute(sql: "DELETE FROM ferry_join_candidates")
        try db.execute(sql: "DELETE FROM ferry_joins")
        return removed
    }

    /// The rows of `space`: the tables placed in it, each with the condition selecting its rows.
    static func selections(of space: String, in store: FerryStore) -> [RecordWriter.Selection] {
        store.tables.compactMap { table in
            switch table.space {
            case .personal: nil
            case .named(let named): named == space ? RecordWriter.Selection(table: table, condition: "1") : nil
            case .column(let column): RecordWriter.Selection(table: table, condition: "\(column.quotedDatabaseIdentifier) = ?", arguments: [space])
            }
        }
    }

    /// Notes, as a join of `space` begins, the rows the store holds of it with no change queued,
    /// each with the version the store knows: what the join's sweep may remove if the join does
    /// not bring it (`finishJoins`). Returns whether there are any.
    static func noteCandidates(of space: String, store: FerryStore, db: Database) throws -> Bool {
        var noted = 0
        for selection in selections(of: space, in: store) {
            let (table, condition, arguments) = (selection.table, selection.condition, selection.arguments)
            // Qualified: inside the subqueries an unqualified `id` or `entity` is theirs.
            let quoted = table.table.quotedDatabaseIdentifier
            let entity = table.entityColumn.map { "\(quoted).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral
            let key = "CAST(\(quoted).\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT)"
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO ferry_join_candidates (space, entity, entity_id, version)
                    SELECT \(space.sqlLiteral), \(entity), \(key),
                        \(KnownVersions.versionSQL(entity: entity, entityID: key))
                    FROM \(table.table.quotedDatabaseIdentifier) WHERE \(condition)
                        AND NOT \(OutboxTable.hasChangesCondition(entity: entity, key: key))
                    """,
                arguments: arguments
            )
            noted += db.changesCount
        }
        return noted > 0
    }
}
