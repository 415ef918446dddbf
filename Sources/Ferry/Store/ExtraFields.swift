import FerryProtocol
import Foundation
import GRDB

/// Fields of pulled records that the app's columns did not hold (`ferry_extras`, kept by
/// `RecordWriter`, sent back by capture). When a new version of the app adds a column for one
/// of them, the store moves the kept value into the column as it opens: the column would
/// otherwise hold NULL and its next change would send that NULL over the kept value.
enum ExtraFields {
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
