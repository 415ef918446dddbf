import FerryProtocol
import Foundation
import GRDB

/// The queue of local changes waiting for the server.
///
/// A batch is always a prefix of the pending entries in id order, because the
/// server keeps one high-water mark per client: sending id 900 before id 600
/// would make 600 a `duplicate`. Within that prefix, changes to the same record
/// are coalesced into its latest state, carried by its latest entry's id, and a
/// record created and deleted before the server ever saw it is not sent at all.
///
/// Every change it makes belongs to a sync run holding the store's `SyncLease`, and confirms
/// that lease in the same transaction. Changes queued outside a run (the app's writes through
/// capture, ``FerryClient/retryDeadLetters()``) are new entries at the end of the queue, each in
/// one transaction, which a run's batch in flight never includes: they need no lease.
struct Outbox: Sendable {
    let store: FerryStore
    let lease: SyncLease

    /// The most a batch's request body may carry: the protocol's 4 MiB, less room for the
    /// envelope, so that a batch of large records is cut by size instead of refused with 413.
    static let bodyBudget = ProtocolLimits.maxPushBodyBytes - 64 * 1024

    /// Pending and dead-lettered entry counts.
    static func counts(in store: FerryStore) async throws -> (pending: Int, deadLettered: Int, lastSyncedAt: Date?) {
        try await store.database.read { db in
            let pending = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE \(OutboxState.queuedCondition)") ?? 0
            let dead =
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = ?", arguments: [OutboxState.deadLettered.rawValue]) ?? 0
            let lastSynced = try Double.fetchOne(db, sql: "SELECT last_synced_at FROM ferry_meta")
            return (pending, dead, lastSynced.map(Date.init(timeIntervalSince1970:)))
        }
    }

    /// The newest entry's id (0 for an empty queue).
    static func newestEntry(in store: FerryStore) async throws -> Int64 {
        try await store.database.read { db in try Int64.fetchOne(db, sql: "SELECT max(id) FROM ferry_outbox") ?? 0 }
    }

    /// How many changes were queued after entry `id` and still wait, and the newest entry's id:
    /// a range of the primary key, however long the queue.
    static func queuedEntries(after id: Int64, in store: FerryStore) async throws -> (count: Int, newest: Int64) {
        try await store.database.read { db in
            let count =
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE id > ? AND \(OutboxState.queuedCondition)", arguments: [id]) ?? 0
            return (count, max(id, try Int64.fetchOne(db, sql: "SELECT max(id) FROM ferry_outbox") ?? 0))
        }
    }

    /// Takes the next batch: at most `limit` entries, coalesced, marked in flight.
    /// `nil` when nothing is pending.
    ///
    /// `inFlight` holds the records of a batch sent but not yet applied (the uploader reads
    /// ahead while it waits): the batch stops before the first change of one of them, which
    /// waits for that answer, since the answer may give the record a version its change must
    /// be sent over, or another identity (a merge) its change must follow. `nil` when the
    /// first pending change is such a one.
    ///
    /// A batch stops before the entry that would take its body past `bodyBudget`. A mutation
    /// the protocol cannot carry (data that is not a JSON object, a number JSON has no form for,
    /// data over 256 KiB, an id or key out of bounds) is dead-lettered here with the reason,
    /// never sent: one bad record must not hold back the queue behind it.
    func nextBatch(limit: Int, inFlight: Set<RecordRef> = []) async throws -> OutboxBatch? {
        try await store.database.write { db in
            try lease.confirm(db)
            var rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, entity, entity_id, op, data, natural_key, sent, sent_as, coalesce(changed_at, queued_at), space, space_incarnation,
                        base
                    FROM ferry_outbox
                    WHERE state = ? ORDER BY id LIMIT ?
                    """,
                arguments: [OutboxState.pending.rawValue, limit]
            )
            guard !rows.isEmpty else { return nil }
            // The client id the batch goes out under, read with it: another process on this
            // store may have taken a new one. An entry sent before goes out again under the id
            // it was sent under (its answer may have been lost: the server answers it from that
            // id's kept results, and under another id would apply it twice), so a batch holds
            // entries of one client id.
            let meta = try Row.fetchOne(db.cachedStatement(sql: "SELECT client_id, highest_sent FROM ferry_meta"))
            let current: String = meta?[0] ?? store.clientID
            store.identity.clientID = current
            let goesAs = { (row: Row) -> String in ((row[6] as Bool?) == true ? row[7] as String? : nil) ?? current }
            var batch = OutboxBatch(entryCount: rows.count, clientID: goesAs(rows[0]))
            var bytes = 0
            // Per record in this batch: whether one of its entries was sent before.
            var sentBefore: [RecordRef: Bool] = [:]
            for (index, row) in rows.enumerated() {
                let record = RecordRef(entity: row[1], entityID: row[2])
                let sent = (row[6] as Bool?) ?? false
                // Ids and keys as the body writes them, escapes included: ids full of quotes
                // or backslashes took a batch of 1,000 past the limit.
                bytes +=
                    OutgoingMutation.envelopeBytes + ((row[4] as String?)?.utf8.count ?? 0) + JSONTextWriter.encodedLength(of: record.entityID)
                    + ((row[5] as String?).map(JSONTextWriter.encodedLength(of:)) ?? 0)
                // An entry sent before stands for exactly one mutation (the entries coalesced
                // into it were folded into it when it was sent): it goes out again alone, as
                // it was sent, and the record's other changes wait for its answer (the version
                // or identity it brings) instead of being coalesced on stale knowledge.
                let mixesSent = sentBefore[record].map { $0 || sent } ?? false
                let otherClientID = !goesAs(row).hasSameBytes(as: batch.clientID)
                if inFlight.contains(record) || (index > 0 && (bytes > Self.bodyBudget || mixesSent || otherClientID)) {
                    rows.removeSubrange(index...)
                    break
                }
                sentBefore[record] = (sentBefore[record] ?? false) || sent
            }
            guard !rows.isEmpty else { return nil }
            batch.entryCount = rows.count
            var latest: [RecordRef: Row] = [:]
            var entries: [RecordRef: [Int64]] = [:]
            // What the record was before the first change the batch folds: what its change started from.
            var bases: [RecordRef: String] = [:]
            // Columns by position: GRDB matches names case-insensitively, which costs more
            // than the rest of reading a row.
            for row in rows {
                let record = RecordRef(entity: row[1], entityID: row[2])
                latest[record] = row
                if entries[record] == nil, let base = row[11] as String? { bases[record] = base }
                entries[record, default: []].append(row[0])
            }
            var coalesced: [(kept: Int64, folded: [Int64])] = []
            // The version the server last gave a record: a delete needs it (none means the
            // server never saw the record) and so does an upsert that detects conflicts.
            let versioned = latest.filter { record, row in
                MutationOp(rawValue: row[3]) == .delete || store.table(forEntity: record.entity)?.detectsConflicts == true
            }
            let versions = try KnownVersions.of(versioned.keys, db: db)
            for (record, row) in latest {
                let op = MutationOp(rawValue: row[3]) ?? .upsert
                let detectsConflicts = store.table(forEntity: record.entity)?.detectsConflicts == true
                let version = versions[record]
                if op == .delete, version == nil {
                    // Created and deleted before the server saw it: nothing to send.
                    batch.unsent += entries[record] ?? []
                    continue
                }
                var mutation = OutgoingMutation(id: row[0], entity: record.entity, entityID: record.entityID, op: op)
                mutation.changedAt = OutgoingMutation.milliseconds(row[8])
                mutation.space = row[9]
                mutation.spaceIncarnation = row[10]
                if detectsConflicts { mutation.baseText = bases[record] }
                if op == .upsert {
                    mutation.dataText = row[4]
                    mutation.naturalKey = row[5]
                }
                // A delete is checked too: a stale delete must not silently beat another device's edit.
                if detectsConflicts { mutation.baseVersion = version ?? 0 }
                if let problem = mutation.problem() {
                    batch.refused.append(RefusedMutation(id: mutation.id, entries: entries[record] ?? [], reason: problem))
                    continue
                }
                batch.mutations.append(mutation)
                if (row[6] as Bool?) != true { batch.firstSent.insert(mutation.id) }
                // The entries coalesced into the mutation are folded into its own: from now on
                // one entry stands for what was sent, so a resend is the same mutation.
                batch.entries[mutation.id] = [mutation.id]
                let folded = (entries[record] ?? []).filter { $0 != mutation.id }
                batch.unsent += folded
                if !folded.isEmpty { coalesced.append((mutation.id, folded)) }
            }
            batch.mutations.sort { $0.id < $1.id }
            // The entry that stands for coalesced edits keeps the time the first of them was
            // queued: how long a change has waited is counted from the first edit (and stays
            // untimed if one of them was queued by a version that recorded no time). The time the
            // change was made stays its own, the last edit's, for every resend (`changedAt`).
            for (kept, folded) in coalesced {
                try db.cachedStatement(
                    sql: """
                        UPDATE ferry_outbox SET changed_at = coalesce(changed_at, queued_at), queued_at = (
                            SELECT CASE WHEN COUNT(*) = COUNT(queued_at) THEN MIN(queued_at) END
                            FROM ferry_outbox WHERE id = ?1 OR id IN (SELECT value FROM json_each(?2)))
                        WHERE id = ?1
                        """
                )
                .execute(arguments: [kept, Self.idList(folded)])
            }
            if !batch.unsent.isEmpty {
                try db.cachedStatement(sql: "DELETE FROM ferry_outbox WHERE \(Self.idIn)").execute(arguments: [Self.idList(batch.unsent)])
            }
            for refused in batch.refused {
                try Self.deadLetter(refused.entries, reason: refused.reason, db: db)
            }
            let sent = batch.entries.values.flatMap { $0 }
            if !sent.isEmpty {
                try db.cachedStatement(
                    sql: "UPDATE ferry_outbox SET state = ?, sent = 1, sent_as = ?, sent_at = \(OutboxState.nowSQL) WHERE \(Self.idIn)"
                )
                .execute(arguments: [OutboxState.inFlight.rawValue, batch.clientID, Self.idList(sent)])
            }
            if batch.clientID.hasSameBytes(as: current), let highest = batch.mutations.last?.id, highest > meta?[1] ?? 0 {
                try db.cachedStatement(sql: "UPDATE ferry_meta SET highest_sent = ?").execute(arguments: [highest])
            }
            return batch
        }
    }

    /// Puts a batch's entries back to pending, to be taken again (after a 413, or when sync stops).
    func release(_ batch: OutboxBatch) async throws {
        let ids = batch.entries.values.flatMap { $0 }
        guard !ids.isEmpty else { return }
        try await store.database.write { db in
            try lease.confirm(db)
            try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ? WHERE state = ? AND \(Self.idIn)")
                .execute(arguments: [OutboxState.pending.rawValue, OutboxState.inFlight.rawValue, Self.idList(ids)])
        }
    }

    /// Dead-letters a batch of one mutation that the server refused whole (400 or 413).
    func deadLetter(_ batch: OutboxBatch, reason: String) async throws {
        try await store.database.write { db in
            try lease.confirm(db)
            try Self.deadLetter(batch.entries.values.flatMap { $0 }, reason: reason, db: db)
        }
    }

    /// Sets `entries` aside with `reason`. A record keeps one dead letter, its newest change:
    /// the dead letters of its earlier changes go (101 autosaves of a document too large to
    /// send were 101 dead letters; retrying the old ones would only undo the newest).
    private static func deadLetter(_ entries: [Int64], reason: String, db: Database) throws {
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

    /// Applies the server's results in one transaction: acknowledged entries leave the
    /// outbox, merged records are re-keyed, rejected ones are dead-lettered and conflicts
    /// resolved by `policy`. A `duplicate` (a resent mutation whose first result the server no
    /// longer keeps) brings the record as the server has it now, which the local row takes
    /// unless more local changes of it are queued. Returns the outcome counts.
    ///
    /// A store that is not the only holder of its client id (copied to another device, or
    /// restored from an older backup) learns it here: the server answers a mutation this store
    /// never sent before as one it already processed (`duplicate`, or `rejected` as a reused
    /// id), or reports a `lastMutationID` above any id this store ever sent. Those mutations
    /// are no acknowledgement: their entries go back to the queue, and the store takes a new
    /// client id under which they are sent again (`BatchOutcome.newClientID`).
    func apply(_ response: PushResponse, to batch: OutboxBatch, policy: ConflictPolicy) async throws -> BatchOutcome {
        guard response.results.count == batch.mutations.count,
            zip(response.results, batch.mutations).allSatisfy({ $0.id == $1.id })
        else {
            throw FerryError.protocolViolation("push results do not match the batch's mutations one to one")
        }
        let outcome = try await store.database.write { db in
            try lease.confirm(db)
            let meta = try Row.fetchOne(db.cachedStatement(sql: "SELECT client_id, highest_sent FROM ferry_meta"))
            let highestSent: Int64 = meta?[1] ?? 0
            let plan = AnswerPlan(response, to: batch, clientID: meta?[0] ?? "", highestSent: highestSent)
            var outcome = plan.outcome(unsent: batch.unsent.count)
            var notOurs: [Int64] = []
            var absorbed: [RecordRef] = []
            var children = ForeignKeyChildren()
            var finished: [Int64] = []
            var rekeys: [(record: RecordRef, canonical: String)] = []
            var serverStates: [ServerState] = []
            var later = try LaterChanges(for: zip(batch.mutations, response.results), db: db)
            // Saved once at the end; nothing in between reads them.
            var versions = KnownVersions()
            try FerryStore.withoutCapture(db) {
                for step in plan.steps {
                    let mutation = step.mutation
                    let own = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
                    if step.decision == .resend {
                        notOurs += step.entries
                        continue
                    }
                    if let canonical = step.canonical {
                        try rekey(
                            entity: mutation.entity,
                            from: mutation.entityID,
                            to: canonical,
                            after: mutation.id,
                            later: later,
                            children: &children,
                            db: db
                        )
                        later.follow(own, to: step.serverRecord, after: mutation.id)
                        rekeys.append((own, canonical))
                    }
                    switch step.decision {
                    case .resend:
                        break
                    case .finish(_, _, let version, let current):
                        if let version { versions.set(version, of: step.serverRecord) }
                        if let current { serverStates.append(ServerState(record: step.serverRecord, state: current, space: mutation.space)) }
                        finished += step.entries
                    case .deadLetter(let reason, let code, let current):
                        try Self.deadLetter(step.entries, reason: reason, db: db)
                        // A refused change of a record the user may still read: the dead letter holds
                        // what was attempted, and the row shows what the server holds again.
                        if let current {
                            serverStates.append(ServerState(record: own, state: current, space: mutation.space))
                        } else if try Self.unreadable(mutation, refusedWith: code, db: db) {
                            // Refused in a space the user cannot read: the row goes with the refusal.
                            serverStates.append(ServerState(record: own, state: .absent, space: mutation.space))
                        }
                    case .resolve(let judged, let current, let absorbsOwn):
                        finished += step.entries
                        // The server has the mutation's own record too: it goes, as a merge would delete it.
                        if absorbsOwn { absorbed.append(own) }
                        try resolve(judged, current: current, policy: policy, resolved: &outcome.resolved, later: &later, versions: &versions, db: db)
                    }
                }
                if !notOurs.isEmpty {
                    let superseded = try Self.superseded(resending: plan, db: db)
                    finished += superseded
                    notOurs.removeAll { superseded.contains($0) }
                    try db.cachedStatement(sql: "UPDATE ferry_outbox SET state = ?, sent = NULL, sent_as = NULL WHERE \(Self.idIn)")
                        .execute(arguments: [OutboxState.pending.rawValue, Self.idList(notOurs)])
                    outcome.returnedToQueue = notOurs.count
                }
                try rekeyQueuedEntries(rekeys, db: db)
                for record in absorbed {  // queued after the re-keying, which would move them to the holder
                    try Self.queue(entity: record.entity, entityID: record.entityID, op: .delete, data: nil, naturalKey: nil, db: db)
                }
                try Self.finish(finished, db: db)
                try adopt(serverStates, versions: &versions, db: db)
            }
            try versions.save(db: db)
            // Ids go out increasing under a client id, so the entries back in the queue need one
            // under which nothing above them was sent: a batch read ahead may already have gone
            // out above them under the current id.
            let reason =
                plan.anotherHolder.map {
                    "another store holds client id \(batch.clientID) (a copy of this store on another device, or a backup restored here): \($0)"
                }
                ?? notOurs.min().flatMap { lowest in
                    lowest <= highestSent
                        ? "changes of another holder's client id \(batch.clientID) are back in the queue below ids already sent under client id \(meta?[0] ?? "")"
                        : nil
                }
            let written = plan.written
            if let reason {
                let clientID = ClientIdentity.newClientID()
                try db.execute(sql: "UPDATE ferry_meta SET client_id = ?, highest_sent = 0", arguments: [clientID])
                try db.execute(sql: "DELETE FROM ferry_answered")
                outcome.newClientID = (meta?[0] ?? batch.clientID, clientID, reason)
            } else if plan.underCurrentID, !written.isEmpty {
                // Writes of this store's own, answered: the next pull names them, and the server
                // leaves them out (`Puller`). Only these ids, never a ceiling: a copy of this
                // store elsewhere may write under the same client id with ids in between.
                try db.cachedStatement(sql: "INSERT OR IGNORE INTO ferry_answered (id) SELECT value FROM json_each(?)")
                    .execute(arguments: [Self.idList(written)])
            }
            return outcome
        }
        if let change = outcome.newClientID { store.identity.clientID = change.new }
        return outcome
    }

    /// The entries of `plan`'s resent mutations that are done with instead: sent again under a
    /// new client id, each lands after every change answered here, so one whose record a later
    /// change already wrote (in this batch, merges included) or will write (queued) would put
    /// older data over newer.
    private static func superseded(resending plan: AnswerPlan, db: Database) throws -> Set<Int64> {
        let resent = plan.steps.filter { $0.decision == .resend }
        let records = resent.map { RecordRef(entity: $0.mutation.entity, entityID: $0.mutation.entityID) }
        let queued = try queuedEntries(of: records, db: db)
        let lastWritten = plan.lastWritten
        var superseded: Set<Int64> = []
        for (step, record) in zip(resent, records) {
            let entries = Set(step.entries)
            let writtenLater = (lastWritten[record] ?? 0) > step.mutation.id
            let queuedLater = queued[record]?.contains { $0 > step.mutation.id && !entries.contains($0) } ?? false
            if writtenLater || queuedLater { superseded.formUnion(entries) }
        }
        return superseded
    }

    /// Removes answered entries, and the dead letters their answers supersede: retried, such a
    /// dead letter would put older data over newer. Found from the answered entries by record
    /// (an index), never by scanning the queue for dead letters.
    private static func finish(_ entries: [Int64], db: Database) throws {
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

    /// Why `result` shows that another store holds the batch's client id, or `nil`: a mutation
    /// the server calls reused (this store resends exactly what it sent, so a reused id is never
    /// its own), one never sent before that the server already processed, or one resent whose
    /// `duplicate` describes a record that does not hold what this store sent.
    static func anotherHolderEvidence(_ mutation: OutgoingMutation, _ result: PushResult, firstSent: Bool) -> String? {
        switch result.status {
        case .rejected where result.code == PushResult.mutationIDReused:
            return "the server answered mutation \(mutation.id) as an id used for another change"
        case .duplicate where firstSent:
            return "mutation \(mutation.id) was sent from this store for the first time, and the server answered it as one it had already processed"
        case .duplicate where !reflects(result.current, mutation):
            return "mutation \(mutation.id) was answered as already processed, and the record does not hold what this store sent"
        default:
            return nil
        }
    }

    /// Whether a record's state is what `mutation` wrote.
    private static func reflects(_ state: RecordState?, _ mutation: OutgoingMutation) -> Bool {
        guard mutation.op == .upsert else { return state == nil || state?.deleted == true }
        guard let state, !state.deleted, let text = mutation.dataText, case .object(let sent)? = try? JSONReader.parse(text.utf8) else {
            return false
        }
        return state.data == sent
    }

    /// Adds a change to the queue, as capture would.
    static func queue(
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

    /// Whether the server refused `mutation` for its space (`code`) in a space this store does not
    /// know it may read: no membership of that incarnation in the latest pull. (One it knows
    /// goes at the pull that revokes it; a readable one comes with the server's `current`.)
    private static func unreadable(_ mutation: OutgoingMutation, refusedWith code: String?, db: Database) throws -> Bool {
        guard let space = mutation.space, [ErrorCode.forbidden.rawValue, ErrorCode.spaceDeleted.rawValue].contains(code) else { return false }
        let known = try Row.fetchOne(db.cachedStatement(sql: "SELECT incarnation FROM ferry_spaces WHERE space = ?"), arguments: [space])
        guard let known else { return true }
        return mutation.spaceIncarnation != nil && (known[0] as String?) != nil && (known[0] as String?) != mutation.spaceIncarnation
    }

    /// A record as the server reported it now, in the space the change named.
    private struct ServerState {
        var record: RecordRef
        var state: RecordState
        var space: String?
    }

    /// Local rows take the server's state of records the server reported as they are now,
    /// except rows with local changes still queued (those reach the server later and win or
    /// conflict there), as a pull would. A state at version 0 is no record: the row goes, and
    /// the store forgets the record's version.
    private func adopt(_ states: [ServerState], versions: inout KnownVersions, db: Database) throws {
        guard !states.isEmpty else { return }
        let queued = try Self.queuedRecords(among: states.map(\.record), db: db)
        var writer = RecordWriter(store: store)
        // Checked statement by statement (a re-keying earlier in the answer defers them): a state
        // the app's schema refuses is skipped here, not failed at the answer's commit.
        let deferred = try Bool.fetchOne(db, sql: "PRAGMA defer_foreign_keys") ?? false
        try db.execute(sql: "PRAGMA defer_foreign_keys = OFF")
        defer { if deferred { try? db.execute(sql: "PRAGMA defer_foreign_keys = ON") } }
        for server in states where !queued.contains(server.record) {
            if server.state.deleted {
                // Through the one removal path: rows of the app's that reference it are held aside, not failing the answer.
                _ = try writer.remove(try RecordWriter.Selection.records([server.record], in: store), db: db)
            } else {
                do {
                    try writer.write(
                        entity: server.record.entity,
                        entityID: server.record.entityID,
                        data: server.state.data ?? [:],
                        naturalKey: server.state.naturalKey,
                        space: .some(server.space),
                        db: db
                    )
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    continue  // the app's schema refuses the server's state here now: the row stays as it is
                }
            }
            if server.state.version == 0 {
                try versions.forget(server.record, db: db)
            } else {
                versions.set(server.state.version, of: server.record)
            }
        }
    }

    /// Which of `records` have local changes waiting to be sent.
    static func queuedRecords(among records: [RecordRef], db: Database) throws -> Set<RecordRef> {
        Set(try queuedEntries(of: records, db: db).keys)
    }

    /// The ids of the entries of `records` waiting to be sent, found through the outbox's index
    /// by record (`ferry-v6`).
    static func queuedEntries(of records: [RecordRef], db: Database) throws -> [RecordRef: [Int64]] {
        guard !records.isEmpty else { return [:] }
        let wanted = Set(records)
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: queuedEntriesSQL),
            arguments: [String(decoding: try JSONEncoder().encode(records.map(\.entityID)), as: UTF8.self)]
        )
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
        let highest = try db.cachedStatement(sql: "SELECT max(id) FROM ferry_outbox")
        let top = try Int64.fetchOne(highest) ?? 0
        try db.cachedStatement(sql: "DELETE FROM ferry_outbox WHERE \(condition)").execute(arguments: arguments)
        guard try Int64.fetchOne(highest) ?? 0 < top else { return }
        try db.cachedStatement(sql: "UPDATE ferry_outbox SET id = ? WHERE state = ?").execute(arguments: [top, OutboxState.highWaterMark.rawValue])
    }

    /// `id IN` the JSON array of `idList`, one argument: the statement is the same for every
    /// batch, so it is prepared once (a list of 500 literal ids took as long to parse as to run).
    static let idIn = "id IN (SELECT value FROM json_each(?))"

    static func idList(_ ids: [Int64]) -> String {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}
