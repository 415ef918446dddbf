import FerryProtocol
import GRDB

/// The version the server last gave each record (`ferry_versions`): what a delete or a
/// conflict-checked upsert is sent over, and what tells a pull which changes are news.
///
/// Read and written a page or a batch at a time, one statement per entity for a read and one
/// for a write, instead of one statement per record: at a million records the per-record
/// statements were a fifth of a pull's local work.
package struct KnownVersions {
    /// Versions learned in the current transaction, not yet saved; the last for a record wins.
    private var learned: [RecordRef: Int64] = [:]

    /// The known versions of `records`; records the server never versioned are absent.
    static func of(_ records: some Sequence<RecordRef>, db: Database) throws -> [RecordRef: Int64] {
        // Grouped by the entity's bytes, as SQLite compares it (Swift's `==` would merge
        // canonically equivalent names).
        let byEntity = Dictionary(grouping: records) { Array($0.entity.utf8) }
        var versions: [RecordRef: Int64] = [:]
        let select = try db.cachedStatement(
            sql: "SELECT entity_id, version FROM ferry_versions WHERE entity = ? AND entity_id IN (SELECT value FROM json_each(?))"
        )
        for records in byEntity.values {
            let entity = records[0].entity
            let rows = try Row.fetchCursor(select, arguments: [entity, JSONTextWriter.array(of: records.map(\.entityID))])
            while let row = try rows.next() {
                versions[RecordRef(entity: entity, entityID: row[0])] = row[1]
            }
        }
        return versions
    }

    /// The known version of the record `entity`/`entityID` (SQL expressions) as a SQL
    /// expression, NULL when the server never versioned it: for a statement that reads it beside
    /// other tables (a held row, a join candidate, the CLI's listing).
    package static func versionSQL(entity: String, entityID: String) -> String {
        "(SELECT v.version FROM ferry_versions v WHERE v.entity = \(entity) AND v.entity_id = \(entityID))"
    }

    /// Whether the store knows the version of any record.
    static func anyKnown(db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_versions)")) == true
    }

    /// The records whose version is known and that `table` (of `entity, entity_id` rows, a
    /// pull from scratch's seen records) does not hold.
    static func records(notIn table: String, db: Database) throws -> [RecordRef] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT entity, entity_id FROM ferry_versions v WHERE NOT EXISTS
                    (SELECT 1 FROM \(table) s WHERE s.entity = v.entity AND s.entity_id = v.entity_id)
                """
        ).map { RecordRef(entity: $0[0], entityID: $0[1]) }
    }

    /// Forgets the versions of `records`.
    static func forget(_ records: some Sequence<RecordRef>, db: Database) throws {
        let forget = try db.cachedStatement(sql: "DELETE FROM ferry_versions WHERE entity = ? AND entity_id = ?")
        for record in records { try forget.execute(arguments: [record.entity, record.entityID]) }
    }

    /// Forgets the versions of the records `query` selects (`entity, entity_id` rows).
    static func forget(recordsIn query: String, arguments: StatementArguments = [], db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_versions WHERE (entity, entity_id) IN (\(query))", arguments: arguments)
    }

    mutating func set(_ version: Int64, of record: RecordRef) {
        learned[record] = version
    }

    /// Forgets the version of `record`: the server holds no such record.
    mutating func forget(_ record: RecordRef, db: Database) throws {
        learned[record] = nil
        try db.cachedStatement(sql: "DELETE FROM ferry_versions WHERE entity = ? AND entity_id = ?").execute(arguments: [
            record.entity, record.entityID,
        ])
    }

    /// Writes what was learned, `chunk` records a statement, and forgets it.
    mutating func save(db: Database) throws {
        guard !learned.isEmpty else { return }
        let rows = Array(learned)
        var start = 0
        while start < rows.count {
            let count = RecordWriter.statementRows(rows.count - start, most: 64)
            var values: [DatabaseValue] = []
            values.reserveCapacity(count * 3)
            for (record, version) in rows[start..<start + count] {
                values += [record.entity.databaseValue, record.entityID.databaseValue, version.databaseValue]
            }
            try db.cachedStatement(sql: Self.upserts[count.trailingZeroBitCount]).execute(arguments: StatementArguments(values))
            start += count
        }
        learned = [:]
    }

    /// The statements of 1, 2, 4, … 64 rows: the rows are bound, not parsed from JSON text by
    /// SQLite (which cost a fifth of a page's writing).
    private static let upserts = (0...6).map { upsert(rows: 1 << $0) }
    private static func upsert(rows: Int) -> String {
        "INSERT INTO ferry_versions (entity, entity_id, version) VALUES "
            + Array(repeating: "(?, ?, ?)", count: rows).joined(separator: ", ")
            + " ON CONFLICT DO UPDATE SET version = excluded.version"
    }
}
