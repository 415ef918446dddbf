import FerryProtocol
import GRDB

/// The version the server last gave each record (`ferry_versions`): what a delete or a
/// conflict-checked upsert is sent over, and what tells a pull which changes are news.
///
/// Read and written a page or a batch at a time, one statement per entity for a read and one
/// for a write, instead of one statement per record: at a million records the per-record
/// statements were a fifth of a pull's local work.
struct KnownVersions {
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
            var ids = JSONTextWriter(capacity: 2 + records.count * 16)
            ids.raw("[")
            for (index, record) in records.enumerated() {
                if index > 0 { ids.raw(",") }
                ids.string(record.entityID)
            }
            ids.raw("]")
            let rows = try Row.fetchCursor(select, arguments: [entity, String(decoding: ids.bytes, as: UTF8.self)])
            while let row = try rows.next() {
                versions[RecordRef(entity: entity, entityID: row[0])] = row[1]
            }
        }
        return versions
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

    /// Writes what was learned, in one statement, and forgets it.
    mutating func save(db: Database) throws {
        guard !learned.isEmpty else { return }
        var rows = JSONTextWriter(capacity: 2 + learned.count * 40)
        rows.raw("[")
        for (index, (record, version)) in learned.enumerated() {
            rows.raw(index > 0 ? ",[" : "[")
            rows.string(record.entity)
            rows.raw(",")
            rows.string(record.entityID)
            rows.raw(",")
            rows.integer(version)
            rows.raw("]")
        }
        rows.raw("]")
        // `WHERE true` tells SQLite's parser that ON CONFLICT belongs to the INSERT, not to a join.
        try db.cachedStatement(
            sql: """
                INSERT INTO ferry_versions (entity, entity_id, version)
                SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?) WHERE true
                ON CONFLICT DO UPDATE SET version = excluded.version
                """
        ).execute(arguments: [String(decoding: rows.bytes, as: UTF8.self)])
        learned = [:]
    }
}
