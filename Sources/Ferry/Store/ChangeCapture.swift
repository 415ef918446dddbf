import GRDB

/// Installs the triggers that copy every write of a synced table into the outbox.
///
/// They are dropped and recreated on every open, so they always match the
/// table's current columns.
enum ChangeCapture {
    static func install(for table: SyncedTable, in db: Database) throws {
        guard try db.tableExists(table.table) else {
            throw FerryError.invalidTable("table \(table.table) does not exist; create it (for example in the schema migrator) before opening the store")
        }
        let columns = try db.columns(in: table.table).map(\.name)
        for required in [table.primaryKey] + [table.naturalKey, table.entityColumn].compactMap({ $0 }) where !columns.contains(required) {
            throw FerryError.invalidTable("table \(table.table) has no column \(required)")
        }
        if case .document(let column) = table.layout, !columns.contains(column) {
            throw FerryError.invalidTable("table \(table.table) has no column \(column)")
        }
        let name = table.table
        let quoted = name.quotedDatabaseIdentifier
        let entity = { (row: String) in table.entityColumn.map { "\(row).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral }
        for suffix in ["insert", "update", "delete"] {
            try db.execute(sql: "DROP TRIGGER IF EXISTS \("ferry_capture_\(name)_\(suffix)".quotedDatabaseIdentifier)")
        }
        let pk = table.primaryKey.quotedDatabaseIdentifier
        let naturalKey = { (row: String) in table.naturalKey.map { "\(row).\($0.quotedDatabaseIdentifier)" } ?? "NULL" }
        let data = { (row: String) -> String in
            switch table.layout {
            case .document(let column):
                return "json(\(row).\(column.quotedDatabaseIdentifier))"
            case .columns:
                let fields = columns.filter { $0 != table.primaryKey && $0 != table.naturalKey && $0 != table.entityColumn }
                    .map { "\($0.sqlLiteral), \(row).\($0.quotedDatabaseIdentifier)" }
                return "json_object(\(fields.joined(separator: ", ")))"
            }
        }
        let capturing = "(SELECT capturing FROM ferry_meta)"
        let upsert = { (row: String) in
            "INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key) VALUES (\(entity(row)), \(row).\(pk), 'upsert', \(data(row)), \(naturalKey(row)));"
        }
        try db.execute(
            sql: """
                CREATE TRIGGER \("ferry_capture_\(name)_insert".quotedDatabaseIdentifier) AFTER INSERT ON \(quoted) WHEN \(capturing)
                BEGIN \(upsert("NEW")) END;
                CREATE TRIGGER \("ferry_capture_\(name)_update".quotedDatabaseIdentifier) AFTER UPDATE ON \(quoted) WHEN \(capturing)
                BEGIN
                    INSERT INTO ferry_outbox (entity, entity_id, op) SELECT \(entity("OLD")), OLD.\(pk), 'delete' WHERE OLD.\(pk) IS NOT NEW.\(pk) OR \(entity("OLD")) IS NOT \(entity("NEW"));
                    \(upsert("NEW"))
                END;
                CREATE TRIGGER \("ferry_capture_\(name)_delete".quotedDatabaseIdentifier) AFTER DELETE ON \(quoted) WHEN \(capturing)
                BEGIN INSERT INTO ferry_outbox (entity, entity_id, op) VALUES (\(entity("OLD")), OLD.\(pk), 'delete'); END;
                """
        )
    }
}

extension String {
    /// The string as an SQL string literal, quotes doubled.
    var sqlLiteral: String { "'" + replacingOccurrences(of: "'", with: "''") + "'" }
}
