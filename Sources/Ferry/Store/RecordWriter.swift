import FerryProtocol
import Foundation
import GRDB

/// Writes records that come from the server into the app's tables.
/// Callers switch change capture off first, so these writes are never echoed back.
struct RecordWriter {
    let store: FerryStore
    private var columnCache: [String: Set<String>] = [:]
    private let encoder = ProtocolValidation.makeEncoder()

    init(store: FerryStore) {
        self.store = store
    }

    /// Upserts the row with `data`, or deletes it when `data` is `nil`. Entities without a
    /// synced table (explicitly enqueued changes) have no row to write.
    mutating func write(entity: String, entityID: String, data: JSONObject?, naturalKey: String?, db: Database) throws {
        guard let table = store.table(forEntity: entity) else { return }
        let name = table.table.quotedDatabaseIdentifier
        guard let data else {
            let row = table.rowCondition(entity: entity, entityID: entityID)
            try db.cachedStatement(sql: "DELETE FROM \(name) WHERE \(row.sql)").execute(arguments: StatementArguments(row.arguments))
            return
        }
        var values: [(String, DatabaseValueConvertible?)] = [(table.primaryKey, entityID)]
        if let column = table.entityColumn { values.append((column, entity)) }
        if let column = table.naturalKey { values.append((column, naturalKey)) }
        switch table.layout {
        case .document(let column):
            values.append((column, String(decoding: try ProtocolValidation.encode(data, using: encoder), as: UTF8.self)))
        case .columns:
            let known = try columns(of: table, db: db)
            let reserved = [table.primaryKey, table.naturalKey, table.entityColumn].compactMap { $0 }
            for (key, value) in data.sorted(by: { $0.key < $1.key }) where known.contains(key) && !reserved.contains(key) {
                values.append((key, try value.databaseValue()))
            }
        }
        let names = values.map { $0.0.quotedDatabaseIdentifier }
        let key = [table.entityColumn, table.primaryKey].compactMap { $0?.quotedDatabaseIdentifier }
        let updates = names.filter { !key.contains($0) }.map { "\($0) = excluded.\($0)" }
        try db.cachedStatement(
            sql: """
                INSERT INTO \(name) (\(names.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))
                ON CONFLICT (\(key.joined(separator: ", "))) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET " + updates.joined(separator: ", "))
                """
        ).execute(arguments: StatementArguments(values.map { $0.1 } as [(any DatabaseValueConvertible)?]))
    }

    private mutating func columns(of table: SyncedTable, db: Database) throws -> Set<String> {
        if let cached = columnCache[table.table] { return cached }
        let columns = Set(try db.columns(in: table.table).map(\.name))
        columnCache[table.table] = columns
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
