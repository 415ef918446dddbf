import FerryProtocol
import Foundation
import GRDB

/// Writes pulled records into the app's tables so that no record the app's schema refuses (a
/// UNIQUE index, a NOT NULL column, a foreign key, a CHECK) stops the pull: what can be written
/// is written, and what the schema refuses is set aside in `ferry_set_aside` with the reason,
/// retried at the end of every pull (`retrySetAside`), until a later version of the record, or
/// a migration of the app, lets it in.
///
/// Runs inside the caller's transaction with change capture off.
struct PulledRecords {
    /// A record as the server sent it.
    struct Record {
        var ref: RecordRef
        var version: Int64
        /// `nil` for a tombstone.
        var data: JSONObject?
        var naturalKey: String?
        /// The space it lives in; `nil` for the personal space.
        var space: String? = nil
    }

    /// What writing a list of records did.
    struct Outcome {
        var written: [Record] = []
        var refused: [(record: Record, reason: String)] = []
    }

    /// Thrown when a page written quickly met something the app's schema refused: the caller
    /// rolls the whole transaction back and writes the page again, carefully.
    struct NeedsCare: Error {}

    /// Writes `records`, deletes first: they free natural keys and unique values the upserts may take.
    ///
    /// Quickly (every page first): the deletes one at a time, then the upserts many to a
    /// statement (`RecordWriter.upsertMany`), with no savepoint: one around the page made SQLite
    /// copy every page each statement touched into its statement journal, which spilled to a
    /// temporary file (427,000 writes of 4 KiB for 100,000 records). Anything refused throws
    /// `NeedsCare`: a failed statement may keep what it did (`ON CONFLICT FAIL`, a trigger's
    /// `RAISE(FAIL)`), so only a rollback of the transaction undoes it for certain.
    ///
    /// Carefully: one at a time, each in a savepoint, in passes, until a pass writes nothing
    /// more (a task before its project, a natural key taken before the record that held it
    /// gives it up: each goes in once the other has); what is left is refused.
    static func write(_ records: [Record], carefully: Bool, writer: inout RecordWriter, db: Database) throws -> Outcome {
        let deletes = records.filter { $0.data == nil }
        let upserts = records.filter { $0.data != nil }
        guard carefully else {
            do {
                for record in deletes { try write(record, writer: &writer, db: db) }
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                throw NeedsCare()
            }
            let written = try writer.upsertMany(
                upserts.map { ($0.ref.entity, $0.ref.entityID, $0.data ?? [:], $0.naturalKey, SpacePlacement(server: $0.space)) },
                db: db
            )
            guard written else { throw NeedsCare() }
            return Outcome(written: deletes + upserts)
        }
        var outcome = Outcome()
        var remaining = deletes + upserts
        while !remaining.isEmpty {
            var refused: [(record: Record, reason: String)] = []
            for record in remaining {
                do {
                    try db.inSavepoint {
                        try write(record, writer: &writer, db: db)
                        return .commit
                    }
                    outcome.written.append(record)
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    refused.append((record, "the app's schema refused it: \(error.message ?? "\(error.resultCode)")"))
                }
            }
            let progress = refused.count < remaining.count
            remaining = refused.map(\.record)
            if !progress {
                outcome.refused = refused
                break
            }
        }
        return outcome
    }

    private static func write(_ record: Record, writer: inout RecordWriter, db: Database) throws {
        try writer.write(
            entity: record.ref.entity,
            entityID: record.ref.entityID,
            data: record.data,
            naturalKey: record.naturalKey,
            placement: SpacePlacement(server: record.space),
            db: db
        )
    }

    /// Whether any pulled record is set aside.
    static func anySetAside(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_set_aside)")) == true
    }

    /// The records set aside, oldest first: entity, id, version and the schema's reason.
    static func setAside(_ db: Database) throws -> [(entity: String, entityID: String, version: Int64, reason: String)] {
        guard try db.tableExists("ferry_set_aside") else { return [] }  // a store older than set-asides, read by the CLI
        return try Row.fetchAll(db, sql: "SELECT entity, entity_id, version, error FROM ferry_set_aside ORDER BY at").map {
            ($0[0], $0[1], $0[2], $0[3])
        }
    }

    /// Forgets the records set aside that `table` (`entity, entity_id` rows: a pull from
    /// scratch's seen records) does not hold.
    static func forgetSetAside(notIn table: String, db: Database) throws {
        try db.execute(
            sql: """
                DELETE FROM ferry_set_aside WHERE NOT EXISTS
                    (SELECT 1 FROM \(table) s WHERE s.entity = ferry_set_aside.entity AND s.entity_id = ferry_set_aside.entity_id)
                """
        )
    }

    /// Forgets the records set aside of `space` (revoked).
    static func forgetSetAside(inSpace space: String, db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_set_aside WHERE space = ?", arguments: [space])
    }

    /// Keeps what `outcome` set aside and forgets what it wrote.
    static func save(_ outcome: Outcome, db: Database) throws {
        if try anySetAside(db) {
            let forget = try db.cachedStatement(sql: "DELETE FROM ferry_set_aside WHERE entity = ? AND entity_id = ?")
            for record in outcome.written { try forget.execute(arguments: [record.ref.entity, record.ref.entityID]) }
        }
        let keep = try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO ferry_set_aside (entity, entity_id, version, deleted, data, natural_key, error, at, space)
                VALUES (?, ?, ?, ?, ?, ?, ?, \(OutboxState.nowSQL), ?)
                """
        )
        for (record, reason) in outcome.refused {
            let data = try record.data.map { String(decoding: try ProtocolValidation.encode($0), as: UTF8.self) }
            try keep.execute(
                arguments: [
                    record.ref.entity, record.ref.entityID, record.version, record.data == nil, data, record.naturalKey, reason, record.space,
                ]
            )
        }
    }

    /// Tries the records set aside again; returns what happened. Records with local changes
    /// queued wait (their change reaches the server and comes back), and records this store
    /// already holds at their version or newer are forgotten.
    static func retrySetAside(store: FerryStore, db: Database) throws -> Outcome {
        let rows = try Row.fetchAll(db, sql: "SELECT entity, entity_id, version, deleted, data, natural_key, space FROM ferry_set_aside")
        guard !rows.isEmpty else { return Outcome() }
        var records: [Record] = []
        for row in rows {
            let data: JSONObject? =
                (row[3] as Bool) ? nil : try JSONDecoder().decode(JSONObject.self, from: Data(((row[4] as String?) ?? "{}").utf8))
            records.append(Record(ref: RecordRef(entity: row[0], entityID: row[1]), version: row[2], data: data, naturalKey: row[5], space: row[6]))
        }
        let known = try KnownVersions.of(records.map(\.ref), db: db)
        let queued = try Outbox.queuedRecords(among: records.map(\.ref), db: db)
        let stale = records.filter { record in known[record.ref].map { $0 >= record.version } ?? false }
        var writer = RecordWriter(store: store)
        let outcome = try FerryStore.withoutCapture(db) {
            try write(
                records.filter { record in !queued.contains(record.ref) && !stale.contains { $0.ref == record.ref } },
                carefully: true,
                writer: &writer,
                db: db
            )
        }
        var versions = KnownVersions()
        for record in outcome.written { versions.set(record.version, of: record.ref) }
        try versions.save(db: db)
        try save(Outcome(written: outcome.written + stale, refused: outcome.refused), db: db)
        return outcome
    }
}
