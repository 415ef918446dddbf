import FerryProtocol
import Foundation
import GRDB

/// Writes records that come from the server into the app's tables.
/// Callers switch change capture off first, so these writes are never echoed back.
struct RecordWriter {
    let store: FerryStore
    /// Per table, its columns that carry data (not the key, entity or natural key columns), sorted.
    private var dataColumns: [String: [String]] = [:]
    /// Upsert statements by table and the columns they write: records of one table nearly
    /// always have the same fields, so the SQL is built once per shape, not once per record.
    /// The statements live in GRDB's cache of the connection, across pages; GRDB drops one that
    /// failed (it cannot run again: sqlite.org/c3ref/reset.html).
    private var upserts: [String: String] = [:]
    private var last: (table: String, columns: [String], sql: String)?
    /// Whether `ExtraFields` may hold a row: read once, so a store that keeps no extra fields
    /// pays no statement per record for them.
    private var extrasMayExist: Bool?

    init(store: FerryStore) {
        self.store = store
    }

    /// Upserts the row with `data`, or deletes it when `data` is `nil`. Entities without a
    /// synced table (explicitly enqueued changes) have no row to write.
    /// A table whose rows name their space (`SyncedTable.Space.column`) gets a stated
    /// `placement`'s space in that column; an unstated one leaves the row its space.
    ///
    /// With a stated `placement`, the record is the server's and may only touch a row of that space: a
    /// table placed elsewhere, or a row of the same id in another space (the user's own, say,
    /// when someone who shares a space with them picked that id), refuses it as a constraint
    /// would (`PulledRecords` sets it aside with the reason); a delete leaves such a row alone.
    mutating func write(
        entity: String,
        entityID: String,
        data: JSONObject?,
        naturalKey: String?,
        placement: SpacePlacement = .unstated,
        db: Database
    ) throws {
        guard let table = store.table(forEntity: entity) else { return }
        if placement.isStated, !table.holds(space: placement.space) {
            throw DatabaseError(
                resultCode: .SQLITE_CONSTRAINT,
                message: "table \(table.table) holds no record of \(placement.name)"
            )
        }
        // The row's own statement goes first, its kept fields after, as `upsertMany` writes them.
        guard let data else {
            var row = table.rowCondition(entity: entity, entityID: entityID)
            var arguments = StatementArguments(row.arguments)
            if let column = table.spaceColumn, placement.isStated {
                row.sql += " AND \(column.quotedDatabaseIdentifier) IS ?"
                arguments += [placement.space]
            }
            try db.cachedStatement(sql: "DELETE FROM \(table.table.quotedDatabaseIdentifier) WHERE \(row.sql)").execute(arguments: arguments)
            try keepExtras([:], entity: entity, entityID: entityID, db: db)
            return
        }
        let row = try upsertRow(of: table, entity: entity, entityID: entityID, data: data, naturalKey: naturalKey, placement: placement, db: db)
        guard try upsert([row][...], db: db) else {
            throw DatabaseError(
                resultCode: .SQLITE_CONSTRAINT,
                message: "\(entity)/\(entityID) of \(placement.name) has the id of a row of another space here"
            )
        }
    }

    /// A record's row as an upsert writes it.
    struct UpsertRow {
        var table: SyncedTable
        var entity: String
        var entityID: String
        var columns: [String]
        var values: [DatabaseValue]
        /// The columns an existing row takes too (`upsert`).
        var written: [String]
        /// The fields no column holds, kept beside the row; `nil` for a table that keeps none.
        var extras: JSONObject?
    }

    private mutating func upsertRow(
        of table: SyncedTable,
        entity: String,
        entityID: String,
        data: JSONObject,
        naturalKey: String?,
        placement: SpacePlacement,
        db: Database
    ) throws -> UpsertRow {
        var row = UpsertRow(
            table: table,
            entity: entity,
            entityID: entityID,
            columns: [table.primaryKey],
            values: [entityID.databaseValue],
            written: []
        )
        if let column = table.entityColumn {
            row.columns.append(column)
            row.values.append(entity.databaseValue)
        }
        if let column = table.naturalKey {
            row.columns.append(column)
            row.values.append(naturalKey.databaseValue)
        }
        if let column = table.spaceColumn, placement.isStated {
            row.columns.append(column)
            row.values.append(placement.space.databaseValue)
        }
        switch table.layout {
        case .document(let column):
            row.columns.append(column)
            row.values.append(String(decoding: try ProtocolValidation.encode(data), as: UTF8.self).databaseValue)
            row.written = [column]
        case .columns:
            row.written = try dataColumns(of: table, db: db)
            var matched = 0
            for column in row.written {
                guard let value = data[table.field(ofColumn: column)] else { continue }
                matched += 1
                row.columns.append(column)
                row.values.append(try value.databaseValue())
            }
            // A multi-entity table keeps no extra fields (capture would not send them back).
            // Nearly every record has a column for each field: the rest is looked for only when some field has none.
            if table.entityColumn == nil {
                row.extras = [:]
                if matched < data.count {
                    let fields = Set(row.written.map(table.field(ofColumn:)))
                    row.extras = data.filter { !fields.contains($0.key) }
                }
            }
        }
        return row
    }

    /// Upserts many records in one statement per run of records of one table and one shape,
    /// as `write` would one at a time: statements of several rows cost SQLite and GRDB their
    /// per-statement work once a run. Returns false, at once, when `write` would refuse a
    /// record for its space, a statement is refused, or one changed fewer rows than it sent (a
    /// row of another space holds one of their ids): the caller rolls back what was written.
    mutating func upsertMany(
        _ records: [(entity: String, entityID: String, data: JSONObject, naturalKey: String?, placement: SpacePlacement)],
        db: Database
    ) throws -> Bool {
        var run: [UpsertRow] = []
        func flush() throws -> Bool {
            defer { run = [] }
            guard let first = run.first else { return true }
            // At most 999 values a statement (SQLite's oldest limit), in runs of 64, 32, … rows: a few shapes to cache.
            var start = 0
            while start < run.count {
                let part = run[start..<start + Self.statementRows(run.count - start, most: min(64, max(1, 999 / first.columns.count)))]
                start += part.count
                do {
                    guard try upsert(part, db: db) else { return false }
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    return false
                }
            }
            return true
        }
        for record in records {
            guard let table = store.table(forEntity: record.entity) else { continue }
            guard !record.placement.isStated || table.holds(space: record.placement.space) else { return false }
            let row = try upsertRow(
                of: table,
                entity: record.entity,
                entityID: record.entityID,
                data: record.data,
                naturalKey: record.naturalKey,
                placement: record.placement,
                db: db
            )
            if let last = run.last, last.table.table != table.table || last.columns != row.columns {
                guard try flush() else { return false }
            }
            run.append(row)
        }
        return try flush()
    }

    /// Upserts `rows` (one table, one shape) in one statement, then keeps their extra fields.
    /// False when a row of another space holds one of their ids: a row placed in a space (its
    /// space column among the columns) takes no update across spaces (`upsert(into:…)`), so
    /// fewer rows changed than were sent; nothing is kept then.
    private mutating func upsert(_ rows: ArraySlice<UpsertRow>, db: Database) throws -> Bool {
        guard let first = rows.first else { return true }
        try upsert(into: first.table, columns: first.columns, writing: first.written, rows: rows.count, db: db)
            .execute(arguments: StatementArguments(rows.flatMap(\.values)))
        if let column = first.table.spaceColumn, first.columns.contains(column), db.changesCount != rows.count { return false }
        for row in rows { if let extras = row.extras { try keepExtras(extras, entity: row.entity, entityID: row.entityID, db: db) } }
        return true
    }

    /// The rows of the next statement of a many-row write: the largest power of two at most
    /// `remaining` and `most`, so that a few statement shapes are parsed and cached.
    static func statementRows(_ remaining: Int, most: Int) -> Int {
        let rows = min(remaining, most)
        return 1 << (Int.bitWidth - 1 - rows.leadingZeroBitCount)
    }

    /// The upsert of a row with `columns`; an existing row takes every column of `writing` too:
    /// a field the record does not carry (written by an app version without it) is the
    /// column's default, as for a new row, not what the row held before.
    private mutating func upsert(into table: SyncedTable, columns: [String], writing: [String], rows: Int = 1, db: Database) throws -> Statement {
        // Consecutive records nearly always have the last one's shape: compare before building a key.
        if rows == 1, let last, last.table == table.table, last.columns == columns { return try db.cachedStatement(sql: last.sql) }
        let shape = ([table.table, "\(rows)"] + columns).joined(separator: "\u{1}")
        if let sql = upserts[shape] {
            if rows == 1 { last = (table.table, columns, sql) }
            return try db.cachedStatement(sql: sql)
        }
        let names = columns.map(\.quotedDatabaseIdentifier)
        let key = [table.entityColumn, table.primaryKey].compactMap { $0?.quotedDatabaseIdentifier }
        let absent = writing.map(\.quotedDatabaseIdentifier).filter { !names.contains($0) }
        let updates = (names + absent).filter { !key.contains($0) }.map { "\($0) = excluded.\($0)" }
        // A row of another space is never taken over: the update only applies in the row's space.
        let sameSpace =
            table.spaceColumn.map(\.quotedDatabaseIdentifier).map { column in
                names.contains(column) ? " WHERE \(table.table.quotedDatabaseIdentifier).\(column) IS excluded.\(column)" : ""
            } ?? ""
        let row = "(" + Array(repeating: "?", count: names.count).joined(separator: ", ") + ")"
        let sql = """
            INSERT INTO \(table.table.quotedDatabaseIdentifier) (\(names.joined(separator: ", "))) VALUES \(Array(repeating: row, count: rows).joined(separator: ", "))
            ON CONFLICT (\(key.joined(separator: ", "))) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET " + updates.joined(separator: ", ") + sameSpace)
            """
        upserts[shape] = sql
        if rows == 1 { last = (table.table, columns, sql) }
        return try db.cachedStatement(sql: sql)
    }

    /// Keeps the fields of a record that no column holds beside its row (`ExtraFields`), for
    /// capture to send back with the row's next change; none forgets what was kept.
    private mutating func keepExtras(_ fields: JSONObject, entity: String, entityID: String, db: Database) throws {
        if fields.isEmpty {
            if extrasMayExist == nil {
                extrasMayExist = try ExtraFields.anyKept(db)
            }
            guard extrasMayExist == true else { return }
            return try ExtraFields.forget(entity: entity, entityID: entityID, db: db)
        }
        extrasMayExist = true
        try ExtraFields.keep(fields, entity: entity, entityID: entityID, db: db)
    }

    private mutating func dataColumns(of table: SyncedTable, db: Database) throws -> [String] {
        if let cached = dataColumns[table.table] { return cached }
        let reserved = table.reservedColumns
        let columns = try db.columns(in: table.table).map(\.name).filter { !reserved.contains($0) }.sorted()
        dataColumns[table.table] = columns
        return columns
    }
}

extension JSONValue {
    /// The value as a column value: scalars as themselves, arrays and objects as JSON text.
    func databaseValue() throws -> DatabaseValue {
        switch self {
        case .null: .null
        case .bool(let value): value.databaseValue
        case .integer(let value): value.databaseValue
        case .number(let value): value.databaseValue
        case .string(let value): value.databaseValue
        case .array, .object:
            String(decoding: try JSONEncoder().encode(self), as: UTF8.self).databaseValue
        }
    }
}

extension RecordWriter {
    /// Rows of one synced table chosen by an SQL condition on its columns, with its arguments.
    struct Selection {
        var table: SyncedTable
        var condition: String
        var arguments: StatementArguments = []

        /// The rows of `records`, table by table.
        static func records(_ records: [RecordRef], in store: FerryStore) throws -> [Selection] {
            var byTable: [String: (table: SyncedTable, keys: [[String]])] = [:]
            for record in records {
                guard let table = store.table(forEntity: record.entity) else { continue }
                byTable[table.table, default: (table, [])].keys.append([record.entity, record.entityID])
            }
            return try byTable.values.map { table, keys in
                let entity = table.entityColumn.map(\.sqlIdentifier) ?? table.entity.sqlLiteral
                return Selection(
                    table: table,
                    condition: """
                        (\(entity), CAST(\(table.primaryKey.sqlIdentifier) AS TEXT))
                            IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))
                        """,
                    arguments: [String(decoding: try JSONEncoder().encode(keys), as: UTF8.self)]
                )
            }
        }
    }

    /// What a removal did.
    struct Removal: Equatable {
        /// Rows of the selected tables that left the store.
        var removed = 0
        /// Rows of the app's that referenced a removed row, held aside until it returns.
        var held = 0
        /// Every row that left the app's tables.
        var total: Int { removed + held }
    }

    /// Removes the selected rows, uncaptured, with their versions and kept fields, honouring
    /// the app's foreign keys whatever their `ON DELETE`: a row that references a removed row
    /// and is not removed itself (a personal row pointing into a revoked space, say) is held
    /// aside whole (`ferry_held_rows`), with the rows that reference it in turn, and restored
    /// once its parent is back (`restoreHeld`); the selected rows then leave children first, so
    /// no cascade removes a row unseen and uncounted. Foreign keys are checked at commit while
    /// it works (`defer_foreign_keys`), as they were before once it is done.
    mutating func remove(_ selections: [Selection], db: Database) throws -> Removal {
        var removal = Removal()
        guard !selections.isEmpty else { return removal }
        try db.execute(
            sql: "CREATE TEMP TABLE IF NOT EXISTS ferry_removing (tbl TEXT NOT NULL, entity TEXT NOT NULL, key, PRIMARY KEY (tbl, entity, key))"
        )
        try db.execute(sql: "DELETE FROM temp.ferry_removing")
        // The keys first: a condition may read what the removal changes (versions, say).
        for selection in selections {
            let table = selection.table
            let quoted = table.table.sqlIdentifier
            try db.execute(
                sql: """
                    INSERT OR IGNORE INTO temp.ferry_removing (tbl, entity, key)
                    SELECT \(table.table.sqlLiteral), \(entityExpression(table, row: quoted)), \(quoted).\(table.primaryKey.sqlIdentifier)
                    FROM \(quoted) WHERE \(selection.condition)
                    """,
                arguments: selection.arguments
            )
        }
        let deferred = try Bool.fetchOne(db, sql: "PRAGMA defer_foreign_keys") ?? false
        try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
        var children = ForeignKeyChildren()
        let selected = Dictionary(selections.map { ($0.table.table.lowercased(), $0.table) }, uniquingKeysWith: { first, _ in first })
        for table in selected.values.sorted(by: { $0.table < $1.table }) {
            let quoted = table.table.sqlIdentifier
            for reference in try children.keys(referencing: table.table, db: db) {
                let child = reference.table.sqlIdentifier
                var condition = """
                    \(Self.tuple(reference.columns, of: child)) IN
                        (SELECT \(Self.selectList(try Self.parentColumns(of: reference, parent: table.table, db: db), of: quoted)) FROM \(quoted)
                        WHERE \(keyIn(table, row: quoted)))
                    """
                if let selectedChild = selected[reference.table.lowercased()] {
                    condition += " AND NOT \(keyIn(selectedChild, row: child))"
                }
                removal.held += try hold(reference.table, where: condition, children: &children, db: db)
            }
        }
        for table in try childrenFirst(Array(selected.values), children: &children, db: db) {
            let quoted = table.table.sqlIdentifier
            try db.execute(sql: "DELETE FROM \(quoted) WHERE \(keyIn(table, row: quoted))")
            removal.removed += db.changesCount
        }
        let removed = "SELECT entity, CAST(key AS TEXT) FROM temp.ferry_removing"
        try KnownVersions.forget(recordsIn: removed, db: db)
        try ExtraFields.forget(recordsIn: removed, db: db)
        try db.execute(sql: "DELETE FROM temp.ferry_removing")
        // The rest of the transaction (a page's records, say) is checked as before: a pulled
        // record refused by a foreign key is set aside, not failed at commit.
        if !deferred { try db.execute(sql: "PRAGMA defer_foreign_keys = OFF") }
        return removal
    }

    /// Checks foreign keys statement by statement from here (a re-keying earlier in the
    /// transaction defers them): a write the app's schema refuses fails at once, not at the
    /// commit. Returns whether they were deferred, for ``deferForeignKeys(again:db:)``.
    static func checkForeignKeysNow(_ db: Database) throws -> Bool {
        let deferred = try Bool.fetchOne(db, sql: "PRAGMA defer_foreign_keys") ?? false
        try db.execute(sql: "PRAGMA defer_foreign_keys = OFF")
        return deferred
    }

    /// Defers foreign keys to the commit again, if ``checkForeignKeysNow(_:)`` found them deferred.
    static func deferForeignKeys(again deferred: Bool, db: Database) {
        if deferred { try? db.execute(sql: "PRAGMA defer_foreign_keys = ON") }
    }

    /// Puts the rows held aside by `remove` back where their parents are back, uncaptured (they
    /// are as the server last had them, or not synced at all). A held record the server changed
    /// since (the store knows another version of it) is dropped: the server's state, or its
    /// delete, stands. So is a row whose key its table holds again, or whose table is gone. A
    /// row another constraint refuses stays held. Returns how many came back.
    mutating func restoreHeld(db: Database) throws -> Int {
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_held_rows)")) == true else { return 0 }
        // Checked now, statement by statement: a row whose parent is still missing stays held.
        let deferred = try Self.checkForeignKeysNow(db)
        defer { Self.deferForeignKeys(again: deferred, db: db) }
        var restored = 0
        // Newest first: a row is held after the rows that reference it, so parents come back before their children.
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT h.id, h.tbl, h.cols, h.vals, h.entity IS NOT NULL AND h.version IS NOT
                    \(KnownVersions.versionSQL(entity: "h.entity", entityID: "h.entity_id"))
                FROM ferry_held_rows h ORDER BY h.id DESC
                """
        )
        for row in rows {
            let (id, table, columns, values, changed): (Int64, String, String, String, Bool) = (row[0], row[1], row[2], row[3], row[4])
            if !changed {
                do {
                    try db.execute(sql: "INSERT INTO \(table.sqlIdentifier) (\(columns)) VALUES (\(values))")
                    restored += 1
                } catch let error as DatabaseError
                    where error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY || (try? db.tableExists(table)) == false
                {
                    // Its key is taken again (the server sent it anew), or its table is gone: nothing to put back.
                } catch {
                    continue  // its parent is still missing, or another constraint refuses it now: it stays held
                }
            }
            try db.execute(sql: "DELETE FROM ferry_held_rows WHERE id = ?", arguments: [id])
        }
        return restored
    }

    /// Holds aside, whole, the rows of `table` matching `condition` (written on the table's
    /// name, unaliased), with the rows that reference them in turn (first, while they are
    /// still here: a cascade must not take them unseen), and deletes them. Values are kept as
    /// SQL literals that give back the same bytes: text as its UTF-8 bytes, infinities spelled
    /// as numbers. Generated columns are left out. A synced table's rows keep their record and
    /// version, so that a record the server changes meanwhile is not put back over it.
    private mutating func hold(
        _ table: String,
        where condition: String,
        children: inout ForeignKeyChildren,
        db: Database,
        depth: Int = 0
    ) throws -> Int {
        let quoted = table.sqlIdentifier
        // Nothing to hold here: nothing below either (a table referencing itself twice would
        // otherwise be asked about 2^16 times).
        guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(quoted) WHERE \(condition))") == true else { return 0 }
        var held = 0
        if depth < 16 {
            for reference in try children.keys(referencing: table, db: db) {
                let child = reference.table.sqlIdentifier
                held += try hold(
                    reference.table,
                    where: """
                        \(Self.tuple(reference.columns, of: child)) IN
                            (SELECT \(Self.selectList(try Self.parentColumns(of: reference, parent: table, db: db), of: quoted)) FROM \(quoted)
                            WHERE \(condition))
                        """,
                    children: &children,
                    db: db,
                    depth: depth + 1
                )
            }
        }
        let columns = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_xinfo(?) WHERE hidden = 0 ORDER BY cid", arguments: [table])
        let list = columns.map(\.sqlIdentifier).joined(separator: ", ")
        let values = columns.map { column -> String in
            let value = "\(quoted).\(column.sqlIdentifier)"
            return """
                CASE typeof(\(value)) WHEN 'text' THEN 'CAST(' || quote(CAST(\(value) AS BLOB)) || ' AS TEXT)'
                    WHEN 'real' THEN CASE WHEN \(value) > 1.7976931348623157e308 THEN '9e999' WHEN \(value) < -1.7976931348623157e308 THEN '-9e999'
                        ELSE quote(\(value)) END
                    ELSE quote(\(value)) END
                """
        }.joined(separator: " || ', ' || ")
        let synced = store.tables.first { $0.table.lowercased() == table.lowercased() }
        let record =
            synced.map { synced in
                let entity = entityExpression(synced, row: quoted)
                let key = "CAST(\(quoted).\(synced.primaryKey.sqlIdentifier) AS TEXT)"
                return "\(entity), \(key), \(KnownVersions.versionSQL(entity: entity, entityID: key))"
            } ?? "NULL, NULL, NULL"
        try db.execute(
            sql: """
                INSERT INTO ferry_held_rows (tbl, cols, vals, entity, entity_id, version)
                SELECT \(table.sqlLiteral), \(list.sqlLiteral), \(values), \(record) FROM \(quoted) WHERE \(condition)
                """
        )
        try db.execute(sql: "DELETE FROM \(quoted) WHERE \(condition)")
        return held + db.changesCount
    }

    /// `columns` of `row` as one SQL value: the column, or a row value of several.
    private static func tuple(_ columns: [String], of row: String) -> String {
        let list = columns.map { "\(row).\($0.sqlIdentifier)" }
        return list.count == 1 ? list[0] : "(\(list.joined(separator: ", ")))"
    }

    /// `columns` of `row` as a SELECT's list.
    private static func selectList(_ columns: [String], of row: String) -> String {
        columns.map { "\(row).\($0.sqlIdentifier)" }.joined(separator: ", ")
    }

    /// The parent's columns a foreign key references: those it names, else the parent's primary key.
    private static func parentColumns(of key: ForeignKeyChildren.Key, parent: String, db: Database) throws -> [String] {
        key.parentColumns.isEmpty ? try db.primaryKey(parent).columns : key.parentColumns
    }

    /// `row` (a table's name, or an alias of it) is one of the keys being removed, looked up
    /// through the table's key (an index), not by scanning it.
    private func keyIn(_ table: SyncedTable, row: String) -> String {
        let key = "\(row).\(table.primaryKey.sqlIdentifier)"
        guard let column = table.entityColumn else {
            return "\(key) IN (SELECT key FROM temp.ferry_removing WHERE tbl = \(table.table.sqlLiteral) AND entity = \(table.entity.sqlLiteral))"
        }
        return
            "(\(row).\(column.sqlIdentifier), \(key)) IN (SELECT entity, key FROM temp.ferry_removing WHERE tbl = \(table.table.sqlLiteral))"
    }

    private func entityExpression(_ table: SyncedTable, row: String) -> String {
        table.entityColumn.map { "\(row).\($0.sqlIdentifier)" } ?? table.entity.sqlLiteral
    }

    /// `tables` ordered so that a table referencing another of them comes before it.
    private func childrenFirst(_ tables: [SyncedTable], children: inout ForeignKeyChildren, db: Database) throws -> [SyncedTable] {
        var remaining = tables.sorted { $0.table < $1.table }
        var ordered: [SyncedTable] = []
        while !remaining.isEmpty {
            // A table none of the remaining ones is referenced by goes first (a cycle: the first).
            var next = 0
            for (index, table) in remaining.enumerated() {
                let referencedBy = try children.keys(referencing: table.table, db: db).map { $0.table.lowercased() }
                if !remaining.contains(where: { $0.table != table.table && referencedBy.contains($0.table.lowercased()) }) {
                    next = index
                    break
                }
            }
            ordered.append(remaining.remove(at: next))
        }
        return ordered
    }
}
