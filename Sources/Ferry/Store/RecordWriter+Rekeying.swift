import FerryProtocol
import Foundation
import GRDB

/// Re-keying: the one writer of the app's rows moves a record to the id the server holds it
/// under (a merge by natural key), with the rows that reference it.
extension RecordWriter {
    /// The local row of `entity` takes the server's id `canonical`; with `canonicalWins` (this
    /// store changed the canonical record last), the local row goes and the canonical stays.
    ///
    /// Rows of the app's other tables that reference the local row through a foreign key follow
    /// it to the canonical id, checked at commit (`defer_foreign_keys`), and those of synced
    /// tables are queued for upload, since the server's copies still name the local id.
    func rekey(
        entity: String,
        from local: String,
        to canonical: String,
        canonicalWins: Bool,
        children: inout ForeignKeyChildren,
        db: Database
    ) throws {
        guard let table = store.table(forEntity: entity) else { return }
        let name = table.table.quotedDatabaseIdentifier
        let canonicalRow = table.rowCondition(entity: entity, entityID: canonical)
        let localRow = table.rowCondition(entity: entity, entityID: local)
        let moving = try children.rows(referencing: local, in: table, store: store, db: db)
        // Only asked when rows reference this table: the cost of a merge stays as it was without.
        let canonicalHere =
            try moving.references.isEmpty
            || Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM \(name) WHERE \(canonicalRow.sql))",
                arguments: StatementArguments(canonicalRow.arguments)
            ) == true
        if canonicalWins && !canonicalHere {
            // This store deleted the canonical record after the merged change: the local row's
            // children go with it, their deletes queued as the app's own would be.
            try moving.delete(referencing: local, db: db)
        } else {
            // The local row's children point at the canonical id first: deleting or renaming
            // the local row then cascades to none of them (an `ON DELETE CASCADE` would delete
            // them without capture).
            try moving.move(from: local, to: canonical, db: db)
        }
        if canonicalWins {
            try db.cachedStatement(sql: "DELETE FROM \(name) WHERE \(localRow.sql)").execute(arguments: StatementArguments(localRow.arguments))
            try ExtraFields.forget(entity: entity, entityID: local, db: db)
        } else if !moving.references.isEmpty, canonicalHere,
            let values = try Row.fetchOne(db, sql: "SELECT * FROM \(name) WHERE \(localRow.sql)", arguments: StatementArguments(localRow.arguments))
        {
            // Rows reference this table, and the canonical row is here (pulled): it stays, with
            // the children that reference it, and takes the local row's values; deleting it
            // would cascade to its children.
            let columns = values.columnNames.filter { $0.lowercased() != table.primaryKey.lowercased() }
            try db.execute(sql: "DELETE FROM \(name) WHERE \(localRow.sql)", arguments: StatementArguments(localRow.arguments))
            try db.execute(
                sql: "UPDATE \(name) SET \(columns.map { "\($0.quotedDatabaseIdentifier) = ?" }.joined(separator: ", ")) WHERE \(canonicalRow.sql)",
                arguments: StatementArguments(columns.map { values[$0] as DatabaseValue }) + StatementArguments(canonicalRow.arguments)
            )
        } else {
            // Cached: the statements are the same for every record of the table, and preparing
            // them for each merged record was most of the cost of a batch of merges.
            try db.cachedStatement(sql: "DELETE FROM \(name) WHERE \(canonicalRow.sql)").execute(
                arguments: StatementArguments(canonicalRow.arguments)
            )
            try db.cachedStatement(sql: "UPDATE \(name) SET \(table.primaryKey.quotedDatabaseIdentifier) = ? WHERE \(localRow.sql)")
                .execute(arguments: StatementArguments([canonical] + localRow.arguments))
        }
        // Fields the row's columns do not hold follow it too.
        try ExtraFields.move(entity: entity, from: local, to: canonical, db: db)
    }
}
