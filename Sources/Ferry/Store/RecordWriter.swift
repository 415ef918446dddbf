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
    private var upserts: [String: Statement] = [:]
    private var last: (table: String, columns: [String], statement: Statement)?
    /// Whether `ferry_extras` may hold a row: read once, so a store that keeps no extra fields
    /// pays no statement per record for them.
    private var extrasMayExist: Bool?

    init(store: FerryStore) {
        self.store = store
    }

    /// Upserts the row with `data`, or deletes it when `data` is `nil`. Entities without a
    /// synced table (explicitly enqueued changes) have no row to write.
    /// A table whose rows name their space (`SyncedTable.Space.column`) gets `space` in that
    /// column; without one (`nil`, not `.some(nil)`: the personal space) a row keeps its space.
    ///
    /// With a `space`, the record is the server's and may only touch a row of that space: a
    /// table placed elsewhere, or a row of the same id in another space (the user's own, say,
    /// when someone who shares a space with them picked that id), refuses it as a constraint
    /// would (`PulledRecords` sets it aside with the reason); a delete leaves such a row alone.
    mutating func write(entity: String, entityID: String, data: JSONObject?, naturalKey: String?, space: String?? = nil, db: Database) throws {
        guard let table = store.table(forEntity: entity) else { return }
        if case .some(let space) = space, !table.holds(space: space) {
            throw DatabaseError(
                resultCode: .SQLITE_CONSTRAINT,
                message: "table \(table.table) holds no record of \(space.map { "space '\($0)'" } ?? "the personal space")"
            )
        }
        guard let data else {
            try keepExtras([:], entity: entity, entityID: entityID, db: db)
            var row = table.rowCondition(entity: entity, entityID: entityID)
            var arguments = StatementArguments(row.arguments)
            if let column = table.spaceColumn, case .some(let space) = space {
                row.sql += " AND \(column.quotedDatabaseIdentifier) IS ?"
                arguments += [space]
            }
            try db.cachedStatement(sql: "DELETE FROM \(table.table.quotedDatabaseIdentifier) WHERE \(row.sql)").execute(arguments: arguments)
            return
        }
        var columns = [table.primaryKey]
        var values: [(any DatabaseValueConvertible)?] = [entityID]
        if let column = table.entityColumn {
            columns.append(column)
            values.append(entity)
        }
        if let column = table.naturalKey {
            columns.append(column)
            values.append(naturalKey)
        }
        if let column = table.spaceColumn, case .some(let space) = space {
            columns.append(column)
            values.append(space)
        }
        switch table.layout {
        case .document(let column):
            columns.append(column)
            values.append(String(decoding: try ProtocolValidation.encode(data), as: UTF8.self))
        case .columns:
            var unknown = data
            for column in try dataColumns(of: table, db: db) {
                let field = table.field(ofColumn: column)
                guard let value = data[field] else { continue }
                unknown[field] = nil
                columns.append(column)
                values.append(try value.databaseValue())
            }
            // A multi-entity table keeps no extra fields (capture would not send them back).
            if table.entityColumn == nil { try keepExtras(unknown, entity: entity, entityID: entityID, db: db) }
        }
        let written: [String] =
            switch table.layout {
            case .document(let column): [column]
            case .columns: try dataColumns(of: table, db: db)
            }
        try upsert(into: table, columns: columns, writing: written, db: db).execute(arguments: StatementArguments(values))
        if table.spaceColumn != nil, case .some(let space) = space, db.changesCount == 0 {
            throw DatabaseError(
                resultCode: .SQLITE_CONSTRAINT,
                message: "\(entity)/\(entityID) of \(space.map { "space '\($0)'" } ?? "the personal space") has the id of a row of another space here"
            )
        }
    }

    /// The upsert of a row with `columns`; an existing row takes every column of `writing` too:
    /// a field the record does not carry (written by an app version without it) is the
    /// column's default, as for a new row, not what the row held before.
    private mutating func upsert(into table: SyncedTable, columns: [String], writing: [String], db: Database) throws -> Statement {
        // Consecutive records nearly always have the last one's shape: compare before building a key.
        if let last, last.table == table.table, last.columns == columns { return last.statement }
        let shape = ([table.table] + columns).joined(separator: "\u{1}")
        if let statement = upserts[shape] {
            last = (table.table, columns, statement)
            return statement
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
        let statement = try db.makeStatement(
            sql: """
                INSERT INTO \(table.table.quotedDatabaseIdentifier) (\(names.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))
                ON CONFLICT (\(key.joined(separator: ", "))) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET " + updates.joined(separator: ", ") + sameSpace)
                """
        )
        upserts[shape] = statement
        last = (table.table, columns, statement)
        return statement
    }

    /// Keeps the fields of a record that no column holds beside its row (`ferry_extras`), for
    /// capture to send back with the row's next change; none forgets what was kept.
    private mutating func keepExtras(_ fields: JSONObject, entity: String, entityID: String, db: Database) throws {
        if fields.isEmpty {
            if extrasMayExist == nil {
                extrasMayExist = try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_extras)")) ?? false
            }
            guard extrasMayExist == true else { return }
            try db.cachedStatement(sql: "DELETE FROM ferry_extras WHERE entity = ? AND entity_id = ?").execute(arguments: [entity, entityID])
            return
        }
        extrasMayExist = true
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_extras (entity, entity_id, data) VALUES (?, ?, ?)")
            .execute(arguments: [entity, entityID, String(decoding: try ProtocolValidation.encode(fields), as: UTF8.self)])
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
    func databaseValue() throws -> DatabaseValueConvertible? {
        switch self {
        case .null: nil
        case .bool(let value): value
        case .integer(let value): value
        case .number(let value): value
        case .string(let value): value
        case .array, .object:
            String(decoding: try JSONEncoder().encode(self), as: UTF8.self)
        }
    }
}
