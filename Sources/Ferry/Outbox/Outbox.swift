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
            var outcome = BatchOutcome(acknowledgedEntries: batch.unsent.count)
            let meta = try Row.fetchOne(db.cachedStatement(sql: "SELECT client_id, highest_sent FROM ferry_meta"))
            // A batch sent under a client id the store has since given up proves nothing new.
            let underCurrentID = batch.clientID.hasSameBytes(as: meta?[0] ?? "")
            let highestSent: Int64 = meta?[1] ?? 0
            var anotherHolder: String? =
                underCurrentID && response.lastMutationID > highestSent
                ? "the server has processed mutation \(response.lastMutationID), and this store never sent one above \(highestSent)"
                : nil
            for (mutation, result) in zip(batch.mutations, response.results) where underCurrentID && anotherHolder == nil {
                anotherHolder = Self.anotherHolderEvidence(mutation, result, firstSent: batch.firstSent.contains(mutation.id))
            }
            var notOurs: [Int64] = []
            var written: [Int64] = []  // mutations this answer says wrote a record
            var notOursMutations: [OutgoingMutation] = []
            var answeredLast: [RecordRef: Int64] = [:]  // per record (as the server names it), its last mutation written
            var absorbed: [RecordRef] = []
            var children = ForeignKeyChildren()
            var finished: [Int64] = []
            var rekeys: [(record: RecordRef, canonical: String)] = []
            var serverStates: [ServerState] = []
            var later = try LaterChanges(for: zip(batch.mutations, response.results), db: db)
            // Saved once at the end; nothing in between reads them.
            var versions = KnownVersions()
            try FerryStore.withoutCapture(db) {
                for (mutation, result) in zip(batch.mutations, response.results) {
                    let entryIDs = batch.entries[mutation.id] ?? []
                    let reused = result.status == .rejected && result.code == PushResult.mutationIDReused
                    if reused || (result.status == .duplicate && (batch.firstSent.contains(mutation.id) || anotherHolder != nil)) {
                        // Another holder's mutation under this id, not an acknowledgement of ours:
                        // sent again under a new client id.
                        notOurs += entryIDs
                        notOursMutations.append(mutation)
                        continue
                    }
                    // A merge, a duplicate of a merged record, or a conflict judged against the
                    // record holding the mutation's natural key: the local row takes that record's id.
                    let own = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
                    let canonical = result.status == .rejected ? nil : result.entityID.flatMap { $0.hasSameBytes(as: mutation.entityID) ? nil : $0 }
                    if let canonical {
                        try rekey(
                            entity: mutation.entity,
                            from: mutation.entityID,
                            to: canonical,
                            after: mutation.id,
                            later: later,
                            children: &children,
                            db: db
                        )
                        later.follow(own, to: RecordRef(entity: mutation.entity, entityID: canonical), after: mutation.id)
                        rekeys.append((own, canonical))
                        outcome.rekeyed += 1
                    }
                    switch result.status {
                    case .applied, .merged, .duplicate:
                        if result.status != .duplicate {
                            written.append(mutation.id)
                            let record = RecordRef(entity: mutation.entity, entityID: result.entityID ?? mutation.entityID)
                            answeredLast[record] = max(answeredLast[record] ?? 0, mutation.id)
                        }
                        if let version = result.version {
                            versions.set(version, of: RecordRef(entity: mutation.entity, entityID: result.entityID ?? mutation.entityID))
                        }
                        if result.status == .duplicate, let current = result.current {
                            serverStates.append(
                                ServerState(
                                    record: RecordRef(entity: mutation.entity, entityID: result.entityID ?? mutation.entityID),
                                    state: current,
                                    space: mutation.space
                                )
                            )
                        }
                        finished += entryIDs
                        outcome.acknowledgedEntries += entryIDs.count
                        if result.status == .merged { outcome.merged += 1 }
                    case .rejected:
                        try Self.deadLetter(entryIDs, reason: result.error ?? "rejected", db: db)
                        outcome.deadLettered += entryIDs.count
                        // A refused change of a record the user may still read: the dead letter holds
                        // what was attempted, and the row shows what the server holds again.
                        if let current = result.current {
                            serverStates.append(ServerState(record: own, state: current, space: mutation.space))
                        } else if try Self.unreadable(mutation, refusedWith: result.code, db: db) {
                            // Refused in a space the user cannot read: the row goes with the refusal.
                            serverStates.append(ServerState(record: own, state: .absent, space: mutation.space))
                        }
                    case .conflict:
                        finished += entryIDs
                        outcome.acknowledgedEntries += entryIDs.count
                        outcome.conflicts += 1
                        var judged = mutation
                        if let holder = canonical {
                            // Judged against the holder of the mutation's natural key: the same
                            // thing under another id, re-keyed above; the policy decides between the two.
                            judged.entityID = holder
                            // The server has the mutation's own record too: it goes, as a merge would delete it.
                            if (mutation.baseVersion ?? 0) > 0 { absorbed.append(own) }
                        }
                        try resolve(
                            judged,
                            current: result.current,
                            policy: policy,
                            resolved: &outcome.resolved,
                            later: &later,
                            versions: &versions,
                            db: db
                        )
                    }
                }
                if !notOurs.isEmpty {
                    // Sent again under a new client id, it lands after every change answered
                    // here: one whose record a later change already wrote (in this batch, merges
                    // included) or will write (queued) is superseded, and would put older data
                    // over newer. It is done with, not sent again.
                    let records = notOursMutations.map { RecordRef(entity: $0.entity, entityID: $0.entityID) }
                    let queued = try Self.queuedEntries(of: records, db: db)
                    var superseded: Set<Int64> = []
                    for (mutation, record) in zip(notOursMutations, records) {
                        let entries = Set(batch.entries[mutation.id] ?? [])
                        let writtenLater = (answeredLast[record] ?? 0) > mutation.id
                        let queuedLater = queued[record]?.contains { $0 > mutation.id && !entries.contains($0) } ?? false
                        if writtenLater || queuedLater { superseded.formUnion(entries) }
                    }
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
                if !finished.isEmpty {
                    // A dead letter of a record whose later change is answered is superseded:
                    // retried, it would put older data over newer. Found from the answered
                    // entries by record (an index), never by scanning the queue for dead letters.
                    try Self.remove(
                        where: """
                            id IN (SELECT dead.id FROM json_each(?) AS answered
                                JOIN ferry_outbox AS done ON done.id = answered.value
                                JOIN ferry_outbox AS dead ON dead.entity_id = done.entity_id AND dead.entity = done.entity
                                    AND dead.id < done.id AND dead.state = \(OutboxState.deadLettered.rawValue))
                            """,
                        arguments: [Self.idList(finished)],
                        db: db
                    )
                    try Self.remove(where: Self.idIn, arguments: [Self.idList(finished)], db: db)
                }
                try adopt(serverStates, versions: &versions, db: db)
            }
            try versions.save(db: db)
            // Ids go out increasing under a client id, so the entries back in the queue need one
            // under which nothing above them was sent: a batch read ahead may already have gone
            // out above them under the current id.
            let reason =
                anotherHolder.map {
                    "another store holds client id \(batch.clientID) (a copy of this store on another device, or a backup restored here): \($0)"
                }
                ?? notOurs.min().flatMap { lowest in
                    lowest <= highestSent
                        ? "changes of another holder's client id \(batch.clientID) are back in the queue below ids already sent under client id \(meta?[0] ?? "")"
                        : nil
                }
            if let reason {
                let clientID = ClientIdentity.newClientID()
                try db.execute(sql: "UPDATE ferry_meta SET client_id = ?, highest_sent = 0", arguments: [clientID])
                try db.execute(sql: "DELETE FROM ferry_answered")
                outcome.newClientID = (meta?[0] ?? batch.clientID, clientID, reason)
            } else if underCurrentID, !written.isEmpty {
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

    /// Later pending edits of re-keyed records follow them to their canonical ids: one
    /// statement for the whole batch, through the outbox's index by record.
    private func rekeyQueuedEntries(_ rekeys: [(record: RecordRef, canonical: String)], db: Database) throws {
        guard !rekeys.isEmpty else { return }
        try db.execute(
            sql: Self.rekeySQL(count: rekeys.count),
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

    /// The local record takes the server's identity. The server now holds this client's data
    /// under the canonical id, so a stale local copy of the canonical record (pulled earlier)
    /// gives way to the re-keyed row; its later pending edits follow it (`rekeyQueuedEntries`).
    /// But when this store changed the canonical record after the merged mutation, and more
    /// recently than it changed the merged row, that change reaches the server last and decides
    /// the record: the local canonical row (or its absence) stays, and the merged row goes.
    ///
    /// Rows of the app's other tables that reference the local row through a foreign key follow
    /// it to the canonical id, checked at commit (`defer_foreign_keys`), and those of synced
    /// tables are queued for upload, since the server's copies still name the local id.
    private func rekey(
        entity: String,
        from local: String,
        to canonical: String,
        after mutationID: Int64,
        later: LaterChanges,
        children: inout ForeignKeyChildren,
        db: Database
    ) throws {
        guard let table = store.table(forEntity: entity) else { return }
        let name = table.table.quotedDatabaseIdentifier
        let canonicalRow = table.rowCondition(entity: entity, entityID: canonical)
        let localRow = table.rowCondition(entity: entity, entityID: local)
        let moving = try children.rows(referencing: local, in: table, store: store, db: db)
        let canonicalWins =
            later.newest(of: RecordRef(entity: entity, entityID: canonical), after: mutationID).map {
                $0 > later.newest(of: RecordRef(entity: entity, entityID: local), after: mutationID) ?? 0
            } ?? false
        // Only asked when rows reference this table: the cost of a merge stays as it was without.
        let canonicalHere =
            try moving.references.isEmpty
            || Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM \(name) WHERE \(canonicalRow.sql))",
                arguments: StatementArguments(canonicalRow.arguments)
            ) == true
        if canonicalWins && !canonicalHere {
            // This store deleted the canonical record after the merged change: the local row's
            // children go with it, their deletes queued as the app's own would be.
            try moving.delete(referencing: local, db: db)
        } else {
            // The local row's children point at the canonical id first: deleting or renaming
            // the local row then cascades to none of them (an `ON DELETE CASCADE` would delete
            // them without capture).
            try moving.move(from: local, to: canonical, db: db)
        }
        if canonicalWins {
            try db.cachedStatement(sql: "DELETE FROM \(name) WHERE \(localRow.sql)").execute(arguments: StatementArguments(localRow.arguments))
            try db.cachedStatement(sql: "DELETE FROM ferry_extras WHERE entity = ? AND entity_id = ?").execute(arguments: [entity, local])
        } else if !moving.references.isEmpty, canonicalHere,
            let values = try Row.fetchOne(db, sql: "SELECT * FROM \(name) WHERE \(localRow.sql)", arguments: StatementArguments(localRow.arguments))
        {
            // Rows reference this table, and the canonical row is here (pulled): it stays, with
            // the children that reference it, and takes the local row's values; deleting it
            // would cascade to its children.
            let columns = values.columnNames.filter { $0.lowercased() != table.primaryKey.lowercased() }
            try db.execute(sql: "DELETE FROM \(name) WHERE \(localRow.sql)", arguments: StatementArguments(localRow.arguments))
            try db.execute(
                sql: "UPDATE \(name) SET \(columns.map { "\($0.quotedDatabaseIdentifier) = ?" }.joined(separator: ", ")) WHERE \(canonicalRow.sql)",
                arguments: StatementArguments(columns.map { values[$0] as DatabaseValue }) + StatementArguments(canonicalRow.arguments)
            )
        } else {
            // Cached: the statements are the same for every record of the table, and preparing
            // them for each merged record was most of the cost of a batch of merges.
            try db.cachedStatement(sql: "DELETE FROM \(name) WHERE \(canonicalRow.sql)").execute(
                arguments: StatementArguments(canonicalRow.arguments)
            )
            try db.cachedStatement(sql: "UPDATE \(name) SET \(table.primaryKey.quotedDatabaseIdentifier) = ? WHERE \(localRow.sql)")
                .execute(arguments: StatementArguments([canonical] + localRow.arguments))
        }
        // Fields the row's columns do not hold follow it too.
        try db.cachedStatement(
            sql:
                "DELETE FROM ferry_extras WHERE entity = ?1 AND entity_id = ?3 AND EXISTS (SELECT 1 FROM ferry_extras WHERE entity = ?1 AND entity_id = ?2)"
        )
        .execute(arguments: [entity, local, canonical])
        try db.cachedStatement(sql: "UPDATE ferry_extras SET entity_id = ? WHERE entity = ? AND entity_id = ?").execute(arguments: [
            canonical, entity, local,
        ])
    }

    /// Ends a conflict as `policy` says. Changes of the record queued after the conflicting one
    /// were made on the same stale knowledge: the policy sees the newest of them as the local
    /// state, and its decision replaces them all (else they would be sent over the server's
    /// version afterwards and silently undo an accepted server state or a merge).
    private func resolve(
        _ mutation: OutgoingMutation,
        current: RecordState?,
        policy: ConflictPolicy,
        resolved: inout [ResolvedConflict],
        later: inout LaterChanges,
        versions: inout KnownVersions,
        db: Database
    ) throws {
        var local = try mutation.data()
        var changedAt = mutation.changedAt
        var writer = RecordWriter(store: store)
        let record = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
        if let newest = later.newest(of: record, after: mutation.id),
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT op, data, coalesce(changed_at, queued_at) FROM ferry_outbox WHERE id = ?"),
                arguments: [newest]
            )
        {
            let op = MutationOp(rawValue: row[0]) ?? .upsert
            local = try OutgoingMutation(id: newest, entity: mutation.entity, entityID: mutation.entityID, op: op, dataText: row[1]).data()
            changedAt = OutgoingMutation.milliseconds(row[2]) ?? changedAt
            let ids = later.take(of: record, after: mutation.id)
            try Self.remove(where: "state = \(OutboxState.pending.rawValue) AND \(Self.idIn)", arguments: [Self.idList(ids)], db: db)
        }
        let conflict = Conflict(
            entity: mutation.entity,
            entityID: mutation.entityID,
            local: local,
            server: current,
            localChangedAt: changedAt.map { Date(timeIntervalSince1970: Double($0) / 1000) },
            base: try mutation.baseText.map { try JSONDecoder().decode(JSONObject.self, from: Data($0.utf8)) }
        )
        let resolution = policy.resolve(conflict)
        resolved.append(ResolvedConflict(conflict: conflict, resolution: resolution))
        switch resolution {
        case .acceptServer:
            try writer.write(
                entity: mutation.entity,
                entityID: mutation.entityID,
                data: current?.deleted == false ? current?.data : nil,
                naturalKey: current?.naturalKey ?? mutation.naturalKey,
                space: .some(mutation.space),
                db: db
            )
            if let current { versions.set(current.version, of: record) }
        case .keep(let data):
            // Re-send over the server's version: a new entry, so it goes through the queue like any change.
            if let current { versions.set(current.version, of: record) }
            try writer.write(
                entity: mutation.entity,
                entityID: mutation.entityID,
                data: data,
                naturalKey: mutation.naturalKey ?? current?.naturalKey,
                space: .some(mutation.space),
                db: db
            )
            let text = try data.map { String(decoding: try ProtocolValidation.encode($0), as: UTF8.self) }
            // Queued with the local change's time: the resolution is that change, sent again.
            try Self.queue(
                entity: mutation.entity,
                entityID: mutation.entityID,
                op: data == nil ? .delete : .upsert,
                data: text,
                naturalKey: data == nil ? nil : mutation.naturalKey ?? current?.naturalKey,
                queuedAt: changedAt.map { Double($0) / 1000 },
                space: mutation.space,
                spaceIncarnation: mutation.spaceIncarnation,
                db: db
            )
            later.add(db.lastInsertedRowID, of: record)  // a merge into this record later in the batch must see it
        }
    }
}

/// A record within the user's data; ids are equal when their bytes are, as in SQLite.
struct RecordRef: Hashable {
    var entity: String
    var entityID: String

    static func == (a: Self, b: Self) -> Bool { a.entity.hasSameBytes(as: b.entity) && a.entityID.hasSameBytes(as: b.entityID) }

    func hash(into hasher: inout Hasher) {
        entity.hashBytes(into: &hasher)
        entityID.hashBytes(into: &hasher)
    }
}

/// What `Outbox.nextBatch` took.
struct OutboxBatch: Sendable {
    /// Entries read from the queue for this batch.
    var entryCount: Int
    /// The client id it is sent under.
    var clientID: String
    var mutations: [OutgoingMutation] = []
    /// The mutations whose entries were never sent before: an answer that calls one of them
    /// already processed came from another holder of the client id.
    var firstSent: Set<Int64> = []
    /// The outbox entries each mutation stands for (itself and the edits coalesced into it).
    var entries: [Int64: [Int64]] = [:]
    /// Entries removed without being sent: they cancelled out, or were folded into the
    /// mutation that carries their record's latest state.
    var unsent: [Int64] = []
    /// Mutations the protocol cannot carry, dead-lettered instead of sent.
    var refused: [RefusedMutation] = []
    /// `requestBody`, when the uploader encoded it ahead of sending.
    var body: Data?

    /// Whether this batch, read before `previous`'s answer was applied, can be sent as it is:
    /// it must not touch a record of `previous`, under its local id or the canonical one
    /// the server answered with, whose version or identity that answer may change.
    func isIndependent(of previous: OutboxBatch, results: [PushResult]) -> Bool {
        var touched = previous.records
        for (mutation, result) in zip(previous.mutations, results) {
            if let canonical = result.entityID { touched.insert(RecordRef(entity: mutation.entity, entityID: canonical)) }
        }
        return !mutations.contains { touched.contains(RecordRef(entity: $0.entity, entityID: $0.entityID)) }
    }

    /// The records this batch sends changes of.
    var records: Set<RecordRef> {
        Set(mutations.map { RecordRef(entity: $0.entity, entityID: $0.entityID) })
    }

    /// The `PushRequest` body of PROTOCOL.md for this batch.
    func requestBody() -> Data {
        var json = JSONTextWriter(capacity: 64 + mutations.reduce(0) { $0 + 128 + ($1.dataText?.utf8.count ?? 0) })
        json.raw("{\"clientID\":")
        json.string(clientID)
        json.raw(",\"mutations\":[")
        for (index, mutation) in mutations.enumerated() {
            if index > 0 { json.raw(",") }
            mutation.write(to: &json)
        }
        json.raw("]}")
        return Data(json.bytes)
    }
}

/// A mutation dead-lettered without being sent, and why.
struct RefusedMutation: Sendable {
    var id: Int64
    var entries: [Int64]
    var reason: String
}

/// What applying one push response did.
struct BatchOutcome: Sendable {
    var acknowledgedEntries = 0
    var deadLettered = 0
    var merged = 0
    var rekeyed = 0
    var conflicts = 0
    /// Each conflict and how the policy ended it, for the journal.
    var resolved: [ResolvedConflict] = []
    /// Entries answered as another holder's mutations, queued again to go under a new client id.
    var returnedToQueue = 0
    /// The client id the store gave up, the one it took, and why.
    var newClientID: (old: String, new: String, reason: String)?
}

/// The queued entry ids of the records a batch's answer re-keys or reports in conflict, read
/// in one statement per batch (`Outbox.queuedEntries`), so each result can ask what this store
/// changed after its mutation.
struct LaterChanges {
    private var ids: [RecordRef: [Int64]] = [:]

    init<Results: Sequence>(for results: Results, db: Database) throws where Results.Element == (OutgoingMutation, PushResult) {
        var records: [RecordRef] = []
        for (mutation, result) in results {
            let own = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
            if result.status == .conflict { records.append(own) }
            if let canonical = result.entityID, !canonical.hasSameBytes(as: mutation.entityID) {
                records += [own, RecordRef(entity: mutation.entity, entityID: canonical)]
            }
        }
        ids = try Outbox.queuedEntries(of: records, db: db)
    }

    /// The id of the newest entry of `record` after `id`, if any.
    func newest(of record: RecordRef, after id: Int64) -> Int64? {
        ids[record]?.filter { $0 > id }.max()
    }

    /// A change of `record` queued while the batch's answer is applied (a kept conflict's resend).
    mutating func add(_ id: Int64, of record: RecordRef) {
        ids[record, default: []].append(id)
    }

    /// `record`'s entries after `id` now change `canonical` (`rekeyQueuedEntries` moves them
    /// at the end of the batch): a later merge into the same record in this batch sees them.
    mutating func follow(_ record: RecordRef, to canonical: RecordRef, after id: Int64) {
        let moved = take(of: record, after: id)
        if !moved.isEmpty { ids[canonical, default: []] += moved }
    }

    /// The ids of `record`'s entries after `id`, which the caller removes from the outbox.
    mutating func take(of record: RecordRef, after id: Int64) -> [Int64] {
        let taken = ids[record]?.filter { $0 > id } ?? []
        ids[record]?.removeAll { $0 > id }
        return taken
    }
}
