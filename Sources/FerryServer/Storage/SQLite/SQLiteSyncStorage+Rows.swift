import FerryProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// A push's set-based reads and writes on SQLite: a batch's records loaded and written in a few statements.
extension SQLiteSyncStorage {
    /// Loads, in a few queries, every record a batch names by identity and every live holder of its natural keys.
    static func load(_ lookups: BatchPlanner.Lookups, userID: String, db: Database) throws -> [StoredRecord] {
        var found: [RecordRef: StoredRecord] = [:]
        let columns = "r.entity, r.entity_id, r.version, r.deleted, r.natural_key, r.data, r.seq, r.changed_at"
        for chunk in Array(lookups.keys).chunked(rowsPerStatement) {
            let rows = ValuesList(rows: chunk.count, columns: 2)
            let statement = try db.cachedStatement(
                sql: """
                    WITH wanted (entity, entity_id) AS (VALUES \(rows.sql))
                    SELECT \(columns) FROM wanted JOIN records r
                    ON r.user_id = ? AND r.entity = wanted.entity AND r.entity_id = wanted.entity_id
                    """
            )
            let arguments = rows.arguments(chunk.flatMap { [$0.entity, $0.entityID] }) + [userID]
            for row in try Row.fetchAll(statement, arguments: arguments) {
                let record = record(from: row)
                found[record.key] = record
            }
        }
        for chunk in Array(lookups.naturalKeys).chunked(rowsPerStatement) {
            let rows = ValuesList(rows: chunk.count, columns: 2)
            let statement = try db.cachedStatement(
                sql: """
                    WITH wanted (entity, natural_key) AS (VALUES \(rows.sql))
                    SELECT \(columns) FROM wanted JOIN records r
                    ON r.user_id = ? AND r.entity = wanted.entity AND r.natural_key = wanted.natural_key AND r.deleted = 0
                    """
            )
            let arguments = rows.arguments(chunk.flatMap { [$0.entity, $0.naturalKey] }) + [userID]
            for row in try Row.fetchAll(statement, arguments: arguments) {
                let record = record(from: row)
                found[record.key] = record
            }
        }
        return Array(found.values)
    }

    /// Writes a batch's final record states with fresh change positions, in order of last change.
    static func write(_ plan: BatchPlanner.BatchPlan, userID: String, epoch: Int64, db: Database) throws {
        guard !plan.writes.isEmpty else { return }
        try write(plan.effects, db: db)
        for chunk in plan.releasedNaturalKeys.chunked(rowsPerStatement) {
            let rows = ValuesList(rows: chunk.count, columns: 2)
            let statement = try db.cachedStatement(
                sql: """
                    UPDATE records SET natural_key = NULL WHERE user_id = ? AND (entity, entity_id) IN
                        (SELECT column1, column2 FROM (VALUES \(rows.sql)))
                    """
            )
            try statement.execute(arguments: [userID] + rows.arguments(chunk.flatMap { [$0.entity, $0.entityID] }))
        }
        guard
            let end = try Int64.fetchOne(
                // A write of another epoch than the head's first moves the epoch's base to the head (`ChangeHead`).
                db.cachedStatement(
                    sql: """
                        UPDATE change_sequence SET value = value + ?, epoch = ?, epoch_base = CASE WHEN epoch = ? THEN epoch_base ELSE value END
                        WHERE id = 1 RETURNING value
                        """
                ),
                arguments: [plan.writes.count, epoch, epoch]
            )
        else { throw StorageError.corrupt("change_sequence is empty") }
        var position = end - Int64(plan.writes.count)
        if userID.unicodeScalars.first == "\u{1}", let key = Int64(userID.dropFirst()) {
            try db.cachedStatement(sql: "UPDATE spaces SET last_position = ? WHERE key = ?").execute(arguments: [end, key])
        }
        let now = serverMilliseconds()
        for chunk in plan.writes.chunked(rowsPerStatement) {
            let rows = ValuesList(rows: chunk.count, columns: 12)
            // `WHERE` ends the SELECT before `ON CONFLICT` (SQLite's rule for an upsert from a
            // SELECT); it also drops the padding rows.
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO records
                        (user_id, entity, entity_id, version, deleted, natural_key, data, seq, changed_at, written_by, written_mutation,
                        written_seq, written_at)
                    SELECT ?, * FROM (VALUES \(rows.sql)) WHERE column1 IS NOT NULL
                    ON CONFLICT (user_id, entity, entity_id) DO UPDATE SET
                        version = excluded.version, deleted = excluded.deleted, natural_key = excluded.natural_key,
                        data = excluded.data, seq = excluded.seq, changed_at = excluded.changed_at,
                        written_by = excluded.written_by, written_mutation = excluded.written_mutation,
                        written_seq = excluded.written_seq, written_at = excluded.written_at
                    """
            )
            var values: [(any DatabaseValueConvertible)?] = []
            values.reserveCapacity(chunk.count * 12)
            for record in chunk {
                position += 1
                values += [
                    record.entity, record.entityID, record.version, record.deleted, record.naturalKey, record.data, position,
                    record.changedAt, record.writtenBy, record.writtenMutation, position, now,
                ]
            }
            try statement.execute(arguments: [userID] + rows.arguments(values))
        }
        for record in plan.revivedReferences {
            // The references the deletion released: the record's last release.
            try db.cachedStatement(
                sql: """
                    UPDATE attachment_refs SET released_at = NULL WHERE partition = ?1 AND entity = ?2 AND entity_id = ?3
                        AND released_at = (SELECT max(released_at) FROM attachment_refs WHERE partition = ?1 AND entity = ?2 AND entity_id = ?3)
                    """
            )
            .execute(arguments: [userID, record.entity, record.entityID])
        }
        try writeReferences(plan.references, partition: userID, at: now, db: db)
    }

    /// Replaces the attachments of each record in `references` with those it names. Those it
    /// names no more are released at `now`, not forgotten: they stay readable to whoever could read
    /// them until the janitor's first sweep a day later, so a screen still showing the old photo
    /// can load it (``SyncStorage/expireAttachmentUploads(before:)``).
    static func writeReferences(_ references: [RecordRef: [String]], partition: String, at now: Int64, db: Database) throws {
        for (record, digests) in references {
            let arguments: StatementArguments = [partition, record.entity, record.entityID]
            try db.cachedStatement(
                sql: "UPDATE attachment_refs SET released_at = ? WHERE partition = ? AND entity = ? AND entity_id = ? AND released_at IS NULL"
            )
            .execute(arguments: [now] + arguments)
            for digest in digests {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO attachment_refs (partition, entity, entity_id, digest) VALUES (?, ?, ?, ?)
                        ON CONFLICT DO UPDATE SET released_at = NULL
                        """
                )
                .execute(arguments: arguments + [digest])
            }
        }
    }

    /// A record from a row whose columns are entity, entity_id, version, deleted, natural_key,
    /// data, seq, changed_at, read by position: GRDB matches names case-insensitively, which
    /// costs more than the rest of reading a row.
    static func record(from row: Row, withData: Bool = true) -> StoredRecord {
        StoredRecord(
            entity: row[0],
            entityID: row[1],
            version: row[2],
            deleted: row[3],
            naturalKey: row[4],
            data: withData ? row[5] : nil,
            changedAt: row[7]
        )
    }
}
