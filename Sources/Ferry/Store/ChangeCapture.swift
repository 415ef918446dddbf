import FerryProtocol
import GRDB

/// Installs the triggers that copy every write of a synced table into the outbox.
///
/// They are dropped and recreated on every open, so they always match the
/// table's current columns.
enum ChangeCapture {
    /// Drops every capture trigger of the store, for the app's migrations (`FerryStore.init`).
    static func uninstallAll(_ db: Database) throws {
        for trigger in try String.fetchAll(
            db,
            sql: "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'ferry\\_capture\\_%' ESCAPE '\\'"
        ) {
            try db.execute(sql: "DROP TRIGGER \(trigger.quotedDatabaseIdentifier)")
        }
    }

    /// SQL of the JSON data of `row` (an alias of `table`'s table), as a change of it would carry.
    static func dataSQL(of table: SyncedTable, row: String, db: Database) throws -> String {
        try Expressions(table: table, db: db).data(row)
    }

    static func install(for table: SyncedTable, in db: Database) throws {
        let sql = try Expressions(table: table, db: db)
        let name = table.table
        let quoted = name.quotedDatabaseIdentifier
        for suffix in ["insert", "update", "delete", "guard_insert", "guard_update", "guard_delete", "digest_insert", "digest_update"] {
            try db.execute(sql: "DROP TRIGGER IF EXISTS \("ferry_capture_\(name)_\(suffix)".quotedDatabaseIdentifier)")
        }
        let capturing = StoreMeta.capturingSQL
        try db.execute(
            sql: """
                CREATE TRIGGER \("ferry_capture_\(name)_insert".quotedDatabaseIdentifier) AFTER INSERT ON \(quoted) WHEN \(capturing)
                BEGIN \(sql.upsert("NEW")) END;
                CREATE TRIGGER \("ferry_capture_\(name)_update".quotedDatabaseIdentifier) AFTER UPDATE ON \(quoted) WHEN \(capturing)
                BEGIN
                    \(sql.delete("OLD", tail: " WHERE OLD.\(sql.pk) IS NOT NEW.\(sql.pk) OR \(sql.entity("OLD")) IS NOT \(sql.entity("NEW"))"));
                    \(sql.upsert("NEW", base: table.detectsConflicts ? "OLD" : nil))
                END;
                CREATE TRIGGER \("ferry_capture_\(name)_delete".quotedDatabaseIdentifier) AFTER DELETE ON \(quoted) WHEN \(capturing)
                BEGIN
                    \(sql.delete("OLD"));
                    \(ExtraFields.forgetSQL(entity: sql.entity("OLD"), entityID: "OLD.\(sql.pk)"));
                END;
                """
        )
        try installGuards(for: table, sql: sql, in: db)
        try installDigestChecks(for: table, in: db)
    }

    /// Refuses, in the app's own transaction, an attachment column holding anything but a
    /// digest or NULL: what the server would refuse, and what no device could download.
    private static func installDigestChecks(for table: SyncedTable, in db: Database) throws {
        guard !table.attachments.isEmpty else { return }
        let digest = "sha256:" + String(repeating: "[0-9a-f]", count: 64)
        // Only a value that changes: a row pulled with anything there stays editable, by an update
        // or by an upsert (whose insert trigger runs first: the row it would replace is looked up).
        let key = [table.entityColumn, table.primaryKey].compactMap { $0?.quotedDatabaseIdentifier }
        let existing =
            "FROM \(table.table.quotedDatabaseIdentifier) AS EXISTING WHERE " + key.map { "EXISTING.\($0) IS NEW.\($0)" }.joined(separator: " AND ")
        func checks(changedOnly: Bool) -> String {
            table.attachments.map { column -> String in
                let value = table.attachmentSQL(column, row: "NEW")
                let before =
                    changedOnly ? table.attachmentSQL(column, row: "OLD") : "(SELECT \(table.attachmentSQL(column, row: "EXISTING")) \(existing))"
                let changed = " AND \(value) IS NOT \(before)"
                let message: String =
                    "ferry: \(column) of \(table.table) holds attachment digests (sha256: and 64 lowercase hex digits) or NULL; "
                    + "write the digest FerryStore.attach(fileAt:) returned"
                return "SELECT RAISE(ABORT, \(message.sqlLiteral)) WHERE \(value) IS NOT NULL\(changed) "
                    + "AND (typeof(\(value)) != 'text' OR \(value) NOT GLOB '\(digest)');"
            }
            .joined(separator: "\n")
        }
        let (name, quoted, capturing) = (table.table, table.table.quotedDatabaseIdentifier, StoreMeta.capturingSQL)
        try db.execute(
            sql: """
                CREATE TRIGGER \("ferry_capture_\(name)_digest_insert".quotedDatabaseIdentifier) BEFORE INSERT ON \(quoted) WHEN \(capturing)
                BEGIN \(checks(changedOnly: false)) END;
                CREATE TRIGGER \("ferry_capture_\(name)_digest_update".quotedDatabaseIdentifier) BEFORE UPDATE ON \(quoted) WHEN \(capturing)
                BEGIN \(checks(changedOnly: true)) END;
                """
        )
    }

    /// Installs the guards of every table again, after the memberships changed (`SpaceMemberships`).
    static func reinstallGuards(for tables: [SyncedTable], in db: Database) throws {
        for table in tables where table.space != .personal {
            try installGuards(for: table, sql: try Expressions(table: table, db: db), in: db)
        }
    }

    /// Refuses, in the app's own transaction, a write to a space the store knows it may only
    /// read (the memberships of the latest pull, `SpaceMemberships`), naming the space and role;
    /// and a change of a row's space column. Personal tables need none. SQLite's `RAISE` takes
    /// only a literal message: each read-only space known now has its own, and one made
    /// read-only before the guards are installed again gets a message without its name.
    private static func installGuards(for table: SyncedTable, sql: Expressions, in db: Database) throws {
        guard table.space != .personal else { return }
        let name = table.table
        let quoted = name.quotedDatabaseIdentifier
        let capturing = StoreMeta.capturingSQL
        for suffix in ["guard_insert", "guard_update", "guard_delete"] {
            try db.execute(sql: "DROP TRIGGER IF EXISTS \("ferry_capture_\(name)_\(suffix)".quotedDatabaseIdentifier)")
        }
        let readOnly = try SpaceMemberships.readOnlySpaces(db)
        func refuse(_ row: String) -> String {
            let cases = readOnly.map { "WHEN \($0.sqlLiteral) THEN RAISE(ABORT, \(SpaceGuard.message(space: $0, role: "read").sqlLiteral))" }
            let generic = "RAISE(ABORT, \(SpaceGuard.genericMessage.sqlLiteral))"
            let refusal = cases.isEmpty ? generic : "CASE \(sql.space(row)) \(cases.joined(separator: " ")) ELSE \(generic) END"
            return "SELECT \(refusal) WHERE \(SpaceMemberships.readOnlyCondition(space: sql.space(row)));"
        }
        var statements = """
            CREATE TRIGGER \("ferry_capture_\(name)_guard_insert".quotedDatabaseIdentifier) BEFORE INSERT ON \(quoted) WHEN \(capturing)
            BEGIN \(refuse("NEW")) END;
            CREATE TRIGGER \("ferry_capture_\(name)_guard_delete".quotedDatabaseIdentifier) BEFORE DELETE ON \(quoted) WHEN \(capturing)
            BEGIN \(refuse("OLD")) END;
            CREATE TRIGGER \("ferry_capture_\(name)_guard_update".quotedDatabaseIdentifier) BEFORE UPDATE ON \(quoted) WHEN \(capturing)
            BEGIN
                \(refuse("OLD"))
            """
        if let column = table.spaceColumn?.quotedDatabaseIdentifier {
            statements += """

                    SELECT RAISE(ABORT, 'ferry: a row''s space cannot change; delete the row and insert it in the other space')
                    WHERE OLD.\(column) IS NOT NEW.\(column);
                """
        }
        try db.execute(sql: statements + "\nEND;")
    }

    /// Queues an upsert of each row of `table` matching `condition`, exactly as the insert
    /// trigger would have.
    static func queueUpserts(of table: SyncedTable, where condition: String?, arguments: StatementArguments, in db: Database) throws {
        let sql = try Expressions(table: table, db: db)
        try db.execute(
            sql: """
                \(sql.upsert("NEW", tail: " FROM \(table.table.quotedDatabaseIdentifier) AS NEW\(condition.map { " WHERE \($0)" } ?? "")"))
                """,
            arguments: arguments
        )
    }
}

/// The SQL expressions that turn a row of a synced table (named `NEW` or `OLD`) into an outbox entry.
private struct Expressions {
    let table: SyncedTable
    let columns: [String]

    init(table: SyncedTable, db: Database) throws {
        guard try db.tableExists(table.table) else {
            throw FerryError.invalidTable(
                "table \(table.table) does not exist; create it (for example in the schema migrator) before opening the store"
            )
        }
        let columnInfos = try db.columns(in: table.table)
        let columns = columnInfos.map(\.name)
        if case .columns = table.layout {
            // JSON has no bytes: a BLOB column would pass here and fail every write of the table.
            let reserved = table.reservedColumns.map { $0.lowercased() }
            for column in columnInfos where !reserved.contains(column.name.lowercased()) && Self.isDeclaredBlob(column.type) {
                throw FerryError.invalidTable(
                    "table \(table.table): column \(column.name) is declared \(column.type), and JSON cannot carry bytes; declare it "
                        + "TEXT (holding base64, for example), INTEGER or REAL in a migration, or keep the bytes in a table that is "
                        + "not synced"
                )
            }
        }
        for required in table.reservedColumns where !columns.contains(required) {
            throw FerryError.invalidTable("table \(table.table) has no column \(required)")
        }
        for name in table.attachments {
            switch table.layout {
            case .columns where !columns.contains(name) || table.reservedColumns.contains(name):
                throw FerryError.invalidTable("table \(table.table): attachment column \(name) must be one of its data columns")
            case .document where name.isEmpty || name.contains("\""):
                throw FerryError.invalidTable("table \(table.table): attachment field '\(name)' must be a field name without a double quote")
            default: break
            }
        }
        if case .document(let column) = table.layout, !columns.contains(column) {
            throw FerryError.invalidTable("table \(table.table) has no column \(column)")
        }
        if case .named(let space) = table.space, let problem = ProtocolValidation.spaceIDProblem(space) {
            throw FerryError.invalidTable("table \(table.table): \(problem)")
        }
        if table.entityColumn == nil, let problem = ProtocolValidation.entityProblem(table.entity) {
            throw FerryError.invalidTable("table \(table.table): \(problem); name the entity with SyncedTable(table:entity:)")
        }
        // Pulled records are written with ON CONFLICT on the record's key, which SQLite accepts
        // only where a primary key or unique index has exactly those columns.
        let key = Set([table.entityColumn, table.primaryKey].compactMap { $0?.lowercased() })
        let primaryKey = Set(try db.primaryKey(table.table).columns.map { $0.lowercased() })
        // A partial index (… WHERE …) is no conflict target for SQLite: left out.
        let partial = Set(try String.fetchAll(db, sql: "SELECT name FROM pragma_index_list(?) WHERE partial", arguments: [table.table]))
        let uniqueKeys = try db.indexes(on: table.table).filter { $0.isUnique && !partial.contains($0.name) }
            .map { Set($0.columns.map { $0.lowercased() }) }
        guard primaryKey == key || uniqueKeys.contains(key) else {
            let columns = [table.entityColumn, table.primaryKey].compactMap { $0 }.joined(separator: ", ")
            throw FerryError.invalidTable(
                "table \(table.table) needs a PRIMARY KEY or UNIQUE constraint on exactly (\(columns)): pulled records are matched by it"
            )
        }
        self.table = table
        self.columns = columns
    }

    /// Whether a column is declared to hold bytes: its type names BLOB, and none of the words
    /// that give it another affinity first (sqlite.org/datatype3.html, 3.1). A column without a
    /// type is not refused: it syncs text and numbers, as apps that declare none expect.
    static func isDeclaredBlob(_ declared: String) -> Bool {
        let type = declared.uppercased()
        return type.contains("BLOB") && !["INT", "CHAR", "CLOB", "TEXT"].contains(where: type.contains)
    }

    var pk: String { table.primaryKey.quotedDatabaseIdentifier }

    func entity(_ row: String) -> String {
        table.entityColumn.map { "\(row).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral
    }

    /// The row's space: NULL for the personal space.
    func space(_ row: String) -> String {
        switch table.space {
        case .personal: "NULL"
        case .named(let space): space.sqlLiteral
        case .column(let column): "\(row).\(column.quotedDatabaseIdentifier)"
        }
    }

    /// The incarnation of the row's space the store last saw (`SpaceMemberships`): the
    /// change is bound to that space, not to whichever space holds its id when it is sent. NULL
    /// for the personal space, and for a space id the store never saw (the server's current one is meant).
    func incarnation(_ row: String) -> String {
        switch table.space {
        case .personal: "NULL"
        default: SpaceMemberships.lastIncarnationSQL(space: space(row))
        }
    }

    func naturalKey(_ row: String) -> String {
        table.naturalKey.map { "\(row).\($0.quotedDatabaseIdentifier)" } ?? "NULL"
    }

    func data(_ row: String) -> String {
        switch table.layout {
        case .document(let column):
            return "json(\(row).\(column.quotedDatabaseIdentifier))"
        case .columns:
            let dataColumns = columns.filter { !table.reservedColumns.contains($0) }
            let fields = dataColumns.map { "\(table.field(ofColumn: $0).sqlLiteral), \(row).\($0.quotedDatabaseIdentifier)" }
            let object = "json_object(\(fields.joined(separator: ", ")))"
            // Fields this version's columns do not hold, pulled from devices that have them
            // (`ExtraFields`), go back with the row's change, under its columns' values.
            // A JSON path cannot name a field with a double quote: such a table keeps its columns only.
            // A multi-entity table keeps its columns only too (`ExtraFields` folds by entity).
            guard table.entityColumn == nil, !dataColumns.contains(where: { table.field(ofColumn: $0).contains("\"") }) else { return object }
            let paths = dataColumns.map { column in
                let path = "$.\"\(table.field(ofColumn: column))\"".sqlLiteral
                return ", \(path), \(row).\(column.quotedDatabaseIdentifier)"
            }
            // No kept fields (the usual case): no row, NULL, the columns alone; one lookup
            // either way, and json_set only runs for a row that has some.
            let extras = ExtraFields.mergedSQL(paths: paths.joined(), entity: entity(row), entityID: "\(row).\(pk)")
            return "coalesce(\(extras), \(object))"
        }
    }

    /// The outbox entry of an upsert of `row`; with `base` (an update's `OLD`), the row as it
    /// was before, for a conflict policy (only where the id stays: a changed id is a new record).
    func upsert(_ row: String, base: String? = nil, tail: String = "") -> String {
        let before = base.map { "CASE WHEN \($0).\(pk) IS \(row).\(pk) THEN \(data($0)) END" } ?? "NULL"
        return OutboxTable.captureSQL(
            entity: entity(row),
            entityID: "\(row).\(pk)",
            op: .upsert,
            data: data(row),
            naturalKey: naturalKey(row),
            space: space(row),
            incarnation: incarnation(row),
            base: before,
            tail: tail
        ) + ";"
    }

    /// The outbox entry of a delete of `row`.
    func delete(_ row: String, tail: String = "") -> String {
        OutboxTable.captureSQL(
            entity: entity(row),
            entityID: "\(row).\(pk)",
            op: .delete,
            space: space(row),
            incarnation: incarnation(row),
            tail: tail
        )
    }
}

extension String {
    /// The string as an SQL string literal, quotes doubled.
    var sqlLiteral: String { "'" + replacingOccurrences(of: "'", with: "''") + "'" }
    /// The string as an SQL identifier, double quotes doubled (a table of the app's may be named `we"ird`).
    var sqlIdentifier: String { "\"" + replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
}
