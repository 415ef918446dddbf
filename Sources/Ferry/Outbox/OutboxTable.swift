import FerryProtocol
import Foundation
import GRDB

/// The one home of `ferry_outbox`'s SQL: every other file asks it. The migrations that shaped
/// the table (`FerryStore`) and the capture triggers, which insert through `captureSQL`, are the
/// only other places that name it.
///
/// An entry is one local change: pending, in flight, or set aside as a dead letter; one more
/// row, the high-water mark, keeps the highest id ever sent (`OutboxState`).
package enum OutboxTable {
    static let name = "ferry_outbox"

    /// A pending entry, as a batch is cut from it.
    struct Entry {
        var id: Int64
        var record: RecordRef
        var op: MutationOp
        var data: String?
        var naturalKey: String?
        /// Whether the entry went out before, and under which client id.
        var sent: Bool
        var sentAs: String?
        /// When the change was made (seconds since 1970), or queued when that is unknown.
        var changedAt: Double?
        var space: String?
        var spaceIncarnation: String?
        /// The record's state before the change, for a table that detects conflicts.
        var base: String?

        /// Columns by position, in `pending`'s order: GRDB matches names case-insensitively,
        /// which costs more than the rest of reading a row.
        init(_ row: Row) {
            id = row[0]
            record = RecordRef(entity: row[1], entityID: row[2])
            op = MutationOp(rawValue: row[3]) ?? .upsert
            data = row[4]
            naturalKey = row[5]
            sent = (row[6] as Bool?) ?? false
            sentAs = row[7]
            changedAt = row[8]
            space = row[9]
            spaceIncarnation = row[10]
            base = row[11]
        }

        /// The client id the entry goes out under: the one it was sent under before, else `current`.
        func goesAs(_ current: String) -> String {
            (sent ? sentAs : nil) ?? current
        }
    }

    /// The first `limit` pending entries, in id order; with `through`, of those up to that id.
    static func pending(limit: Int, through: Int64 = .max, db: Database) throws -> [Entry] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT id, entity, entity_id, op, data, natural_key, sent, sent_as, coalesce(changed_at, queued_at), space, space_incarnation,
                        base
                    FROM ferry_outbox
                    WHERE state = ? AND id <= ? ORDER BY id LIMIT ?
                    """
            ),
            arguments: [OutboxState.pending.rawValue, through, limit]
        )
        .map(Entry.init)
    }

    /// Moves every pending entry of `records` to the end of the queue, in their order, under new
    /// ids: entries never sent, whose ids the server has not seen (`Outbox.holdBack`).
    static func moveToEnd(_ records: Set<RecordRef>, db: Database) throws {
        let ids = try Int64.fetchAll(
            db,
            sql: """
                SELECT id FROM ferry_outbox WHERE state = ? AND (entity, entity_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))
                ORDER BY id
                """,
            arguments: [OutboxState.pending.rawValue, recordList(records)]
        )
        for id in ids {
            try db.cachedStatement(sql: "UPDATE ferry_outbox SET id = (SELECT max(id) FROM ferry_outbox) + 1 WHERE id = ?").execute(arguments: [id])
        }
    }

    /// Queues the change `entries` stand for again, as a new entry at the end of the queue (the
    /// server has spent their ids), unless a later change of its record is queued, which carries
    /// the record's state instead: then they are done with.
    static func requeue(_ entries: [Int64], of record: RecordRef, db: Database) throws {
        guard let newest = entries.max() else { return }
        let later = try Bool.fetchOne(
            db,
            sql: "SELECT EXISTS (SELECT 1 FROM ferry_outbox WHERE entity = ? AND entity_id = ? AND id > ? AND \(OutboxState.queuedCondition))",
            arguments: [record.entity, record.entityID, newest]
        )
        if later != true {
            try db.execute(
                sql: """
                    INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key, queued_at, changed_at, space, space_incarnation, base)
                    SELECT entity, entity_id, op, data, natural_key, queued_at, changed_at, space, space_incarnation, base FROM ferry_outbox WHERE id = ?
                    """,
                arguments: [newest]
            )
        }
        try remove(where: idIn, arguments: [idList(entries)], db: db)
    }

    /// Dead-letters the queued changes (not in flight: those get the server's answer) whose data
    /// holds `digest`, each with `reason` for its record; returns how many. A digest is 71
    /// characters of its own: found in the data text, it is that attachment.
    static func deadLetterReferencing(_ digest: String, reason: (RecordRef) -> String, db: Database) throws -> Int {
        let rows = try Row.fetchAll(
            db,
            sql: "SELECT id, entity, entity_id FROM ferry_outbox WHERE state = ? AND instr(data, ?) > 0 ORDER BY id",
            arguments: [OutboxState.pending.rawValue, digest]
        )
        for row in rows {
            try deadLetter([row[0]], reason: reason(RecordRef(entity: row[1], entityID: row[2])), db: db)
        }
        return rows.count
    }

    /// Whether the newest queued change of some record (the state a batch sends) holds `digest`.
    static func newestStateReferences(_ digest: String, db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                SELECT EXISTS (SELECT 1 FROM ferry_outbox o WHERE o.\(OutboxState.queuedCondition) AND instr(o.data, ?) > 0
                    AND NOT EXISTS (SELECT 1 FROM ferry_outbox n WHERE n.entity = o.entity AND n.entity_id = o.entity_id AND n.id > o.id
                        AND n.\(OutboxState.queuedCondition)))
                """,
            arguments: [digest]
        ) ?? false
    }

    /// The attachment digests the changes still queued (and, with `deadLetters`, those set
    /// aside) hold, read in one pass over the outbox: eviction and the sweep ask of many files at
    /// once, and a scan per file would cost a whole outbox each.
    static func attachmentDigests(includingDeadLetters deadLetters: Bool, db: Database) throws -> Set<String> {
        let condition = deadLetters ? "state != \(OutboxState.highWaterMark.rawValue)" : OutboxState.queuedCondition
        var digests: Set<String> = []
        let rows = try String.fetchCursor(db, sql: "SELECT data FROM ferry_outbox WHERE \(condition) AND instr(data, 'sha256:') > 0")
        while let data = try rows.next() {
            var rest = data[...]
            while let start = rest.range(of: "sha256:") {
                let candidate = rest[start.lowerBound...].prefix(71)
                if AttachmentDigest(String(candidate)) != nil { digests.insert(String(candidate)) }
                rest = rest[start.upperBound...]
            }
        }
        return digests
    }

    /// Whether any change still queued or set aside holds `digest`.
    static func queuedChangeReferences(_ digest: String, db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: "SELECT EXISTS (SELECT 1 FROM ferry_outbox WHERE state != \(OutboxState.highWaterMark.rawValue) AND instr(data, ?) > 0)",
            arguments: [digest]
        ) ?? false
    }

    private static func recordList(_ records: Set<RecordRef>) -> String {
        String(decoding: (try? JSONEncoder().encode(records.map { [$0.entity, $0.entityID] })) ?? Data("[]".utf8), as: UTF8.self)
    }

    /// The entry `id`, if it is still there.
    static func entry(_ id: Int64, db: Database) throws -> Entry? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT id, entity, entity_id, op, data, natural_key, sent, sent_as, coalesce(changed_at, queued_at), space, space_incarnation,
                        base
                    FROM ferry_outbox WHERE id = ?
                    """
            ),
            arguments: [id]
        )
        .map(Entry.init)
    }

    // MARK: Adding entries

    /// The statement capture queues a change with (its triggers, `FerryStore.queueUpload`): each
    /// argument an SQL expression over the written row, `tail` the SELECT's FROM or WHERE.
    static func captureSQL(
        entity: String,
        entityID: String,
        op: MutationOp,
        data: String = "NULL",
        naturalKey: String = "NULL",
        space: String,
        incarnation: String,
        base: String = "NULL",
        tail: String = ""
    ) -> String {
        """
        INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key, queued_at, space, space_incarnation, base) \
        SELECT \(entity), \(entityID), '\(op.rawValue)', \(data), \(naturalKey), \(OutboxState.nowSQL), \(space), \(incarnation), \(base)\(tail)
        """
    }

    /// Adds a change at the end of the queue, as capture would.
    static func insert(
        entity: String,
        entityID: String,
        op: MutationOp,
        data: String?,
        naturalKey: String?,
        queuedAt: Double? = nil,
        space: String? = nil,
        spaceIncarnation: String? = nil,
        db: Database
    ) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key, queued_at, space, space_incarnation)
                VALUES (?, ?, ?, ?, ?, coalesce(?, \(OutboxState.nowSQL)), ?, ?)
                """
        )
        .execute(arguments: [entity, entityID, op.rawValue, data, naturalKey, queuedAt, space, spaceIncarnation])
    }

    // MARK: Reading the queue

    /// The entries waiting to be sent, not those in flight: what `ferry bench` and `ferry demo`
    /// check of a store.
    package static func pendingCount(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = ?", arguments: [OutboxState.pending.rawValue]) ?? 0
    }

    /// The entries by state (`OutboxState`'s raw values): what `ferry demo` shows of a crashed store.
    package static func countsByState(_ db: Database) throws -> [Int: Int] {
        try Dictionary(uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT state, COUNT(*) FROM ferry_outbox GROUP BY state").map { ($0[0], $0[1]) })
    }

    /// Pending and dead-lettered entry counts.
    static func counts(_ db: Database) throws -> (pending: Int, deadLettered: Int) {
        let pending = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE \(OutboxState.queuedCondition)") ?? 0
        return (pending, try deadLetterCount(db))
    }

    static func deadLetterCount(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = ?", arguments: [OutboxState.deadLettered.rawValue]) ?? 0
    }

    /// The newest entry's id (0 for an empty queue).
    static func newest(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT max(id) FROM ferry_outbox")) ?? 0
    }

    /// How many changes queued after entry `id` still wait: a range of the primary key.
    static func queuedCount(after id: Int64, db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE id > ? AND \(OutboxState.queuedCondition)", arguments: [id]) ?? 0
    }

    /// The changes still to be acknowledged, of one entity.
    struct QueuedEntity {
        var entity: String
        var count: Int
        var inFlight: Int
        /// When the oldest was queued (seconds since 1970), of those whose time is known.
        var oldestQueuedAt: Double?
        /// How many were queued by a version that recorded no time.
        var untimed: Int
        /// When the oldest in flight was sent.
        var firstSentAt: Double?
    }

    /// The changes still to be acknowledged, by entity. Read from stores of any version
    /// (`QueueSnapshot.read(atPath:)`): those before the queue times (ferry-v7) count as untimed.
    static func queuedByEntity(_ db: Database) throws -> [QueuedEntity] {
        let columns = Set(try db.columns(in: "ferry_outbox").map(\.name))
        let times = columns.contains("queued_at") ? "MIN(queued_at), COUNT(*) - COUNT(queued_at)" : "NULL, COUNT(*)"
        let sentSince = columns.contains("sent_at") ? "MIN(CASE WHEN state = \(OutboxState.inFlight.rawValue) THEN sent_at END)" : "NULL"
        return try Row.fetchAll(
            db,
            sql: """
                SELECT entity, COUNT(*), SUM(state = \(OutboxState.inFlight.rawValue)), \(times), \(sentSince)
                FROM ferry_outbox WHERE \(OutboxState.queuedCondition) GROUP BY entity
                """
        )
        .map { QueuedEntity(entity: $0[0], count: $0[1], inFlight: $0[2] ?? 0, oldestQueuedAt: $0[3], untimed: $0[4], firstSentAt: $0[5]) }
    }

    /// Every dead letter, oldest first.
    static func deadLetters(_ db: Database) throws -> [DeadLetter] {
        try Row.fetchAll(
            db,
            sql: "SELECT id, entity, entity_id, op, error FROM ferry_outbox WHERE state = ? ORDER BY id",
            arguments: [OutboxState.deadLettered.rawValue]
        )
        .map { DeadLetter(id: $0[0], entity: $0[1], entityID: $0[2], op: MutationOp(rawValue: $0[3]) ?? .upsert, reason: $0[4] ?? "") }
    }

    /// The records with changes queued, in flight or set aside as dead letters.
    static func recordsWithChanges(_ db: Database) throws -> Set<RecordRef> {
        Set(
            try Row.fetchAll(db, sql: "SELECT DISTINCT entity, entity_id FROM ferry_outbox WHERE state != \(OutboxState.highWaterMark.rawValue)")
                .map { RecordRef(entity: $0[0], entityID: $0[1]) }
        )
    }

    /// SQL true when the record `entity`/`key` (SQL expressions of the outer query) has a change
    /// queued, in flight or set aside as a dead letter.
    static func hasChangesCondition(entity: String, key: String) -> String {
        """
        EXISTS (SELECT 1 FROM ferry_outbox o WHERE o.entity = \(entity) AND o.entity_id = \(key)
            AND o.state != \(OutboxState.highWaterMark.rawValue))
        """
    }

    /// The ids of the entries of `records` waiting to be sent, found through the index by
    /// record (`ferry-v6`).
    static func queuedEntries(of records: [RecordRef], db: Database) throws -> [RecordRef: [Int64]] {
        // An outbox with nothing queued (a new device's pull, most pulls) answers without a look at the records.
        guard !records.isEmpty,
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_outbox WHERE \(OutboxState.queuedCondition))")) == true
        else {
            return [:]
        }
        let wanted = Set(records)
        let rows = try Row.fetchCursor(db.cachedStatement(sql: queuedEntriesSQL), arguments: [JSONTextWriter.array(of: records.map(\.entityID))])
        var queued: [RecordRef: [Int64]] = [:]
        while let row = try rows.next() {
            let record = RecordRef(entity: row[0], entityID: row[1])
            if wanted.contains(record) { queued[record, default: []].append(row[2]) }
        }
        return queued
    }

    /// Selects the queued entries whose ids are in a JSON array (`OutboxCostTests` checks its plan).
    static let queuedEntriesSQL =
        "SELECT entity, entity_id, id FROM ferry_outbox WHERE \(OutboxState.queuedCondition) AND entity_id IN (SELECT value FROM json_each(?))"

    // MARK: Changing entries' state

    /// Later pending edits of re-keyed records follow them to their canonical ids: one
    /// statement for the whole batch, through the outbox's index by record.
    static func rekeyQueuedEntries(_ rekeys: [(record: RecordRef, canonical: String)], db: Database) throws {
        guard !rekeys.isEmpty else { return }
        try db.execute(
            sql: rekeySQL(count: rekeys.count),
            arguments: StatementArguments(rekeys.flatMap { [$0.record.entity, $0.record.entityID, $0.canonical] }) + [OutboxState.pending.rawValue]
        )
    }

    /// Moves the pending entries of `count` records to their canonical ids (`OutboxCostTests` checks its plan).
    static func rekeySQL(count: Int) -> String {
        """
        WITH rekey(entity, local, canonical) AS (VALUES \(Array(repeating: "(?, ?, ?)", count: count).joined(separator: ", ")))
        UPDATE ferry_outbox
        SET entity_id = (SELECT canonical FROM rekey WHERE rekey.entity = ferry_outbox.entity AND rekey.local = ferry_outbox.entity_id)
        WHERE state = ? AND (entity, entity_id) IN (SELECT entity, local FROM rekey)
        """
    }

    /// Marks `ids` in flight, sent under `clientID`.
    static func markInFlight(_ ids: [Int64], clientID: String, db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ?, sent = 1, sent_as = ?, sent_at = \(OutboxState.nowSQL) WHERE \(idIn)")
            .execute(arguments: [OutboxState.inFlight.rawValue, clientID, idList(ids)])
    }

    /// Puts `ids` in flight back to pending, to be taken again.
    static func release(_ ids: [Int64], db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ? WHERE state = ? AND \(idIn)")
            .execute(arguments: [OutboxState.pending.rawValue, OutboxState.inFlight.rawValue, idList(ids)])
    }

    /// Puts every entry in flight back to pending: a new lease holder's run takes them again.
    static func releaseAll(_ db: Database) throws {
        try db.execute(
            sql: "UPDATE ferry_outbox SET state = ? WHERE state = ?",
            arguments: [OutboxState.pending.rawValue, OutboxState.inFlight.rawValue]
        )
    }

    /// Puts `ids` back in the queue as never sent: they go out again under a new client id.
    static func returnToQueue(_ ids: [Int64], db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ?, sent = NULL, sent_as = NULL WHERE \(idIn)")
            .execute(arguments: [OutboxState.pending.rawValue, idList(ids)])
    }

    /// Gives entry `kept`, which stands for the edits of `folded` too, the time the first of them
    /// was queued (untimed if one of them was queued by a version that recorded no time); the
    /// time the change was made stays its own, the last edit's.
    static func fold(_ folded: [Int64], into kept: Int64, db: Database) throws {
        try db.cachedStatement(
            sql: """
                UPDATE ferry_outbox SET changed_at = coalesce(changed_at, queued_at), queued_at = (
                    SELECT CASE WHEN COUNT(*) = COUNT(queued_at) THEN MIN(queued_at) END
                    FROM ferry_outbox WHERE id = ?1 OR id IN (SELECT value FROM json_each(?2)))
                WHERE id = ?1
                """
        )
        .execute(arguments: [kept, idList(folded)])
    }

    /// Sets `entries` aside with `reason`. A record keeps one dead letter, its newest change:
    /// the dead letters of its earlier changes go (101 autosaves of a document too large to
    /// send were 101 dead letters; retrying the old ones would only undo the newest).
    static func deadLetter(_ entries: [Int64], reason: String, db: Database) throws {
        // The entries of one mutation are one record's edits, the newest carrying its state:
        // that one is kept, the ones folded into it go.
        guard let newest = entries.max() else { return }
        if entries.count > 1 {
            try remove(where: "\(idIn) AND id != ?", arguments: [idList(entries), newest], db: db)
        }
        let ids = idList([newest])
        try remove(
            where: """
                state = \(OutboxState.deadLettered.rawValue) AND id < (SELECT min(value) FROM json_each(?1))
                AND (entity, entity_id) IN (SELECT entity, entity_id FROM ferry_outbox WHERE id IN (SELECT value FROM json_each(?1)))
                AND entity_id IN (SELECT entity_id FROM ferry_outbox WHERE id IN (SELECT value FROM json_each(?1)))
                """,
            arguments: [ids],
            db: db
        )
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ?, error = ? WHERE \(idIn)")
            .execute(arguments: [OutboxState.deadLettered.rawValue, reason, ids])
    }

    /// Dead-letters the changes of `space` still queued (not in flight: those get the server's
    /// answer) with `reason`; returns how many.
    static func deadLetterQueued(in space: String, reason: String, db: Database) throws -> Int {
        try db.execute(
            sql: "UPDATE ferry_outbox SET state = ?, error = ? WHERE space = ? AND state = ?",
            arguments: [OutboxState.deadLettered.rawValue, reason, space, OutboxState.pending.rawValue]
        )
        return db.changesCount
    }

    /// The records with changes in `space`, as SQL selecting `entity, entity_id`.
    static let recordsInSpaceSQL = "SELECT entity, entity_id FROM ferry_outbox WHERE space = ?"

    /// Queues every dead letter again as a new entry at the end of the queue (new ids: the server
    /// has spent the old ones), after dropping those a later change of their record supersedes.
    /// Returns the dead letters queued, in their order, and calls `each` with each first.
    static func requeueDeadLetters(_ db: Database, each: (Entry) throws -> Void) throws -> Int {
        let dead = OutboxState.deadLettered.rawValue
        try db.execute(
            sql: """
                DELETE FROM ferry_outbox AS d WHERE d.state = ? AND EXISTS (
                    SELECT 1 FROM ferry_outbox AS later WHERE later.entity = d.entity AND later.entity_id = d.entity_id
                    AND later.id > d.id AND later.\(OutboxState.queuedCondition))
                """,
            arguments: [dead]
        )
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT id, entity, entity_id, op, data, natural_key, sent, sent_as, coalesce(changed_at, queued_at), space, space_incarnation, base
                FROM ferry_outbox WHERE state = ? ORDER BY id
                """,
            arguments: [dead]
        )
        for row in rows { try each(Entry(row)) }
        try db.execute(
            sql: """
                INSERT INTO ferry_outbox (entity, entity_id, op, data, natural_key, queued_at, changed_at, space, space_incarnation)
                SELECT entity, entity_id, op, data, natural_key, queued_at, changed_at, space, space_incarnation FROM ferry_outbox
                WHERE state = ? ORDER BY id
                """,
            arguments: [dead]
        )
        let queued = db.changesCount
        try db.execute(sql: "DELETE FROM ferry_outbox WHERE state = ?", arguments: [dead])
        return queued
    }

    // MARK: Removing entries

    /// Deletes the entries matching `condition` (acknowledged or discarded ones).
    ///
    /// SQLite gives a new entry the highest id plus one, so deleting the entry with the highest
    /// id would hand that id, which the server has already seen, to the next change, and the
    /// server would answer it `duplicate` without applying it. The high-water mark row then
    /// takes that id.
    ///
    /// Finding that row scans the table (it has no index on `state`), so it is looked for only
    /// when the highest id went: a drain acknowledges the oldest entries, and a scan per batch
    /// made draining a million entries cost the square of their count.
    static func remove(where condition: String, arguments: StatementArguments = [], db: Database) throws {
        let top = try newest(db)
        try db.cachedStatement(sql: "DELETE FROM ferry_outbox WHERE \(condition)").execute(arguments: arguments)
        guard try newest(db) < top else { return }
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET id = ? WHERE state = ?").execute(arguments: [top, OutboxState.highWaterMark.rawValue])
    }

    /// Removes answered entries, and the dead letters their answers supersede: retried, such a
    /// dead letter would put older data over newer. Found from the answered entries by record
    /// (an index), never by scanning the queue for dead letters.
    static func finish(_ entries: [Int64], db: Database) throws {
        guard !entries.isEmpty else { return }
        try remove(
            where: """
                id IN (SELECT dead.id FROM json_each(?) AS answered
                    JOIN ferry_outbox AS done ON done.id = answered.value
                    JOIN ferry_outbox AS dead ON dead.entity_id = done.entity_id AND dead.entity = done.entity
                        AND dead.id < done.id AND dead.state = \(OutboxState.deadLettered.rawValue))
                """,
            arguments: [idList(entries)],
            db: db
        )
        try remove(where: idIn, arguments: [idList(entries)], db: db)
    }

    /// Deletes every entry in `ids`.
    static func delete(_ ids: [Int64], db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM ferry_outbox WHERE \(idIn)").execute(arguments: [idList(ids)])
    }

    /// Deletes every dead letter; returns how many.
    static func discardDeadLetters(_ db: Database) throws -> Int {
        let count = try deadLetterCount(db)
        try remove(where: "state = \(OutboxState.deadLettered.rawValue)", db: db)
        return count
    }

    /// `id IN` the JSON array of `idList`, one argument: the statement is the same for every
    /// batch, so it is prepared once (a list of 500 literal ids took as long to parse as to run).
    static let idIn = "id IN (SELECT value FROM json_each(?))"

    static func idList(_ ids: [Int64]) -> String {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}

/// States of an outbox entry.
enum OutboxState: Int {
    case pending = 0
    case inFlight = 1
    case deadLettered = 2
    /// The one row that is not a change: it holds the highest id ever sent once that
    /// entry is gone, so SQLite's next id (the highest plus one) never reuses a sent id.
    case highWaterMark = 3

    /// SQL for entries still to be acknowledged by the server.
    static let queuedCondition = "state IN (\(pending.rawValue), \(inFlight.rawValue))"
    /// SQL for the time now in seconds since 1970 (to the millisecond), as `queued_at` holds it.
    static let nowSQL = "((julianday('now') - 2440587.5) * 86400.0)"
}
