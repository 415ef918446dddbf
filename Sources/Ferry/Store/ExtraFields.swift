import FerryProtocol
import Foundation
import GRDB

/// Fields of pulled records that the app's columns did not hold (`ferry_extras`, kept by
/// `RecordWriter`, sent back by capture). When a new version of the app adds a column for one
/// of them, the store moves the kept value into the column as it opens: the column would
/// otherwise hold NULL and its next change would send that NULL over the kept value.
enum ExtraFields {
    /// Whether any record has fields kept.
    static func anyKept(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_extras)")) ?? false
    }

    /// Keeps `fields` (none of the row's columns hold them) for the record.
    static func keep(_ fields: JSONObject, entity: String, entityID: String, db: Database) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_extras (entity, entity_id, data) VALUES (?, ?, ?)")
            .execute(arguments: [entity, entityID, String(decoding: try ProtocolValidation.encode(fields), as: UTF8.self)])
    }

    /// Forgets the record's kept fields.
    static func forget(entity: String, entityID: String, db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM ferry_extras WHERE entity = ? AND entity_id = ?").execute(arguments: [entity, entityID])
    }

    /// Forgets the kept fields of the records `query` selects (`entity, entity_id` rows).
    static func forget(recordsIn query: String, db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_extras WHERE (entity, entity_id) IN (\(query))")
    }

    /// The record re-keyed from `local` to `canonical` keeps the local row's fields (the
    /// canonical's go, when both had some).
    static func move(entity: String, from local: String, to canonical: String, db: Database) throws {
        try db.cachedStatement(
            sql:
                "DELETE FROM ferry_extras WHERE entity = ?1 AND entity_id = ?3 AND EXISTS (SELECT 1 FROM ferry_extras WHERE entity = ?1 AND entity_id = ?2)"
        )
        .execute(arguments: [entity, local, canonical])
        try db.cachedStatement(sql: "UPDATE ferry_extras SET entity_id = ? WHERE entity = ? AND entity_id = ?").execute(arguments: [
            canonical, entity, local,
        ])
    }

    /// The statement of a capture trigger that forgets a deleted row's kept fields (`entity`,
    /// `entityID`: SQL expressions of the row).
    static func forgetSQL(entity: String, entityID: String) -> String {
        "DELETE FROM ferry_extras WHERE entity = \(entity) AND entity_id = \(entityID)"
    }

    /// The row's kept fields with `paths` (`, path, value` pairs of its columns) set over them,
    /// as a SQL expression for a capture trigger; NULL when it has none.
    static func mergedSQL(paths: String, entity: String, entityID: String) -> String {
        "(SELECT json_set(data\(paths)) FROM ferry_extras WHERE entity = \(entity) AND entity_id = \(entityID))"
    }

    static func fold(into table: SyncedTable, db: Database) throws {
        guard case .columns = table.layout, table.entityColumn == nil,
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ferry_extras WHERE entity = ?)", arguments: [table.entity]) == true
        else { return }
        let reserved = Set([table.primaryKey, table.naturalKey].compactMap { $0 })
        let columns = try db.columns(in: table.table).map(\.name).filter { !reserved.contains($0) }
        let columnByField = Dictionary(columns.map { (table.field(ofColumn: $0), $0) }, uniquingKeysWith: { first, _ in first })
        // Only the rows that hold a field a column now takes: the others stay as they are, unread.
        let fields = String(decoding: try JSONEncoder().encode(Array(columnByField.keys)), as: UTF8.self)
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT entity_id, data FROM ferry_extras
                WHERE entity = ? AND EXISTS (SELECT 1 FROM json_each(data) WHERE key IN (SELECT value FROM json_each(?)))
                """,
            arguments: [table.entity, fields]
        )
        try FerryStore.withoutCapture(db) {
            for row in rows {
                let entityID: String = row[0]
                var fields = try JSONDecoder().decode(JSONObject.self, from: Data((row[1] as String).utf8))
                let known = fields.keys.filter { columnByField[$0] != nil }.sorted()
                guard !known.isEmpty else { continue }
                let assignments = known.map { "\(columnByField[$0]!.quotedDatabaseIdentifier) = ?" }.joined(separator: ", ")
                let values = try known.map { try fields[$0]!.databaseValue() }
                try db.execute(
                    sql: "UPDATE \(table.table.quotedDatabaseIdentifier) SET \(assignments) WHERE \(table.primaryKey.quotedDatabaseIdentifier) = ?",
                    arguments: StatementArguments(values + [entityID])
                )
                for field in known { fields[field] = nil }
                if fields.isEmpty {
                    try db.execute(sql: "DELETE FROM ferry_extras WHERE entity = ? AND entity_id = ?", arguments: [table.entity, entityID])
                } else {
                    try db.execute(
                        sql: "UPDATE ferry_extras SET data = ? WHERE entity = ? AND entity_id = ?",
                        arguments: [String(decoding: try ProtocolValidation.encode(fields), as: UTF8.self), table.entity, entityID]
                    )
                }
            }
        }
    }
}
