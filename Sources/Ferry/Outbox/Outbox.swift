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

    /// Pending and dead-lettered entry counts, and when the store last synced.
    static func counts(in store: FerryStore) async throws -> (pending: Int, deadLettered: Int, lastSyncedAt: Date?) {
        try await store.database.read { db in
            let (pending, dead) = try OutboxTable.counts(db)
            return (pending, dead, try StoreMeta.lastSyncedAt(db))
        }
    }

    /// The newest entry's id (0 for an empty queue).
    static func newestEntry(in store: FerryStore) async throws -> Int64 {
        try await store.database.read(OutboxTable.newest)
    }

    /// How many changes were queued after entry `id` and still wait, and the newest entry's id.
    static func queuedEntries(after id: Int64, in store: FerryStore) async throws -> (count: Int, newest: Int64) {
        try await store.database.read { db in
            (try OutboxTable.queuedCount(after: id, db: db), max(id, try OutboxTable.newest(db)))
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
            let pending = try holdBack(try OutboxTable.pending(limit: limit, db: db), limit: limit, db: db)
            guard !pending.isEmpty else { return nil }
            // The client id the batch goes out under, read with it: another process on this
            // store may have taken a new one.
            let sender = try StoreMeta.sender(db)
            let current = sender.clientID ?? store.clientID
            store.identity.clientID = current
            // A mutation's attachments are digests its data holds too: room for them, at most.
            let entries = Self.cut(pending, current: current, inFlight: inFlight) {
                (store.table(forEntity: $0.record.entity)?.attachments.count ?? 0) * OutgoingMutation.attachmentBytes
            }
            guard let first = entries.first else { return nil }
            var batch = OutboxBatch(entryCount: entries.count, clientID: first.goesAs(current))
            let coalesced = try coalesce(entries, into: &batch, db: db)
            try Self.take(batch, coalesced: coalesced, db: db)
            if batch.clientID.hasSameBytes(as: current), let highest = batch.mutations.last?.id, highest > sender.highestSent {
                try StoreMeta.setHighestSent(highest, db: db)
            }
            return batch
        }
    }

    /// `pending` without the changes that must wait for an attachment's upload: a record whose
    /// newest change here (the state a batch sends, its earlier ones folded into it) references
    /// one still waiting has its queued changes moved to the end of the queue (none was sent: new
    /// ids are free), so the changes behind it go now and it goes once its attachments are on the
    /// server (PROTOCOL.md, "Attachments"). A record with a change sent before is never held: that
    /// change goes again as it was sent.
    private func holdBack(_ pending: [OutboxTable.Entry], limit: Int, db: Database) throws -> [OutboxTable.Entry] {
        let blocked = try AttachmentTable.blocked(db)
        guard !blocked.isEmpty else { return pending }
        // Only the queue as it stands: entries moved past its end are not looked at again.
        let end = try OutboxTable.newest(db)
        var window = pending
        while !window.isEmpty {
            let sent = Set(window.filter(\.sent).map(\.record))
            var newest: [RecordRef: OutboxTable.Entry] = [:]
            for entry in window { newest[entry.record] = entry }
            let held = Set(
                newest.values.filter { entry in
                    !sent.contains(entry.record)
                        && store.table(forEntity: entry.record.entity)?.referencedDigests(inData: entry.data)?
                            .contains(where: blocked.contains) == true
                }
                .map(\.record)
            )
            guard !held.isEmpty else { return window }
            let rest = window.filter { !held.contains($0.record) }
            // Nothing else waits behind them: they stay where they are.
            if rest.isEmpty, window.count < limit { return [] }
            try OutboxTable.moveToEnd(held, db: db)
            if !rest.isEmpty { return rest }
            window = try OutboxTable.pending(limit: limit, through: end, db: db)
        }
        return []
    }

    /// The prefix of `pending` one batch may carry. An entry sent before goes out again under
    /// the client id it was sent under (its answer may have been lost: the server answers it
    /// from that id's kept results, and under another id would apply it twice), so a batch holds
    /// entries of one client id. It stops before the entry that would take its body past
    /// `bodyBudget`, and before the first change of a record in `inFlight`.
    static func cut(
        _ pending: [OutboxTable.Entry],
        current: String,
        inFlight: Set<RecordRef>,
        extraBytes: (OutboxTable.Entry) -> Int = { _ in 0 }
    ) -> [OutboxTable.Entry] {
        guard let first = pending.first else { return [] }
        let clientID = first.goesAs(current)
        var bytes = 0
        // Per record in this batch: whether one of its entries was sent before.
        var sentBefore: [RecordRef: Bool] = [:]
        for (index, entry) in pending.enumerated() {
            // Ids and keys as the body writes them, escapes included: ids full of quotes
            // or backslashes took a batch of 1,000 past the limit.
            bytes +=
                OutgoingMutation.envelopeBytes + (entry.data?.utf8.count ?? 0) + JSONTextWriter.encodedLength(of: entry.record.entityID)
                + (entry.naturalKey.map(JSONTextWriter.encodedLength(of:)) ?? 0) + extraBytes(entry)
            // An entry sent before stands for exactly one mutation (the entries coalesced
            // into it were folded into it when it was sent): it goes out again alone, as
            // it was sent, and the record's other changes wait for its answer (the version
            // or identity it brings) instead of being coalesced on stale knowledge.
            let mixesSent = sentBefore[entry.record].map { $0 || entry.sent } ?? false
            let otherClientID = !entry.goesAs(current).hasSameBytes(as: clientID)
            if inFlight.contains(entry.record) || (index > 0 && (bytes > bodyBudget || mixesSent || otherClientID)) {
                return Array(pending[..<index])
            }
            sentBefore[entry.record] = (sentBefore[entry.record] ?? false) || entry.sent
        }
        return pending
    }

    /// Folds `entries` into one mutation per record, its latest state carried by its latest
    /// entry's id, into `batch`: a record created and deleted before the server saw it is
    /// `unsent`, a mutation the protocol cannot carry is `refused`. Returns the entries each
    /// kept entry stands for besides its own.
    private func coalesce(_ entries: [OutboxTable.Entry], into batch: inout OutboxBatch, db: Database) throws -> [(kept: Int64, folded: [Int64])] {
        var latest: [RecordRef: OutboxTable.Entry] = [:]
        var ids: [RecordRef: [Int64]] = [:]
        // What the record was before the first change the batch folds: what its change started from.
        var bases: [RecordRef: String] = [:]
        for entry in entries {
            latest[entry.record] = entry
            if ids[entry.record] == nil, let base = entry.base { bases[entry.record] = base }
            ids[entry.record, default: []].append(entry.id)
        }
        var coalesced: [(kept: Int64, folded: [Int64])] = []
        // The version the server last gave a record: a delete needs it (none means the
        // server never saw the record) and so does an upsert that detects conflicts.
        let versioned = latest.filter { record, entry in entry.op == .delete || store.table(forEntity: record.entity)?.detectsConflicts == true }
        let versions = try KnownVersions.of(versioned.keys, db: db)
        for (record, entry) in latest {
            let detectsConflicts = store.table(forEntity: record.entity)?.detectsConflicts == true
            let version = versions[record]
            let folding = ids[record] ?? []
            if entry.op == .delete, version == nil {
                // Created and deleted before the server saw it: nothing to send.
                batch.unsent += folding
                continue
            }
            var mutation = OutgoingMutation(id: entry.id, entity: record.entity, entityID: record.entityID, op: entry.op)
            mutation.changedAt = OutgoingMutation.milliseconds(entry.changedAt)
            mutation.space = entry.space
            mutation.spaceIncarnation = entry.spaceIncarnation
            if detectsConflicts { mutation.baseText = bases[record] }
            if entry.op == .upsert {
                mutation.dataText = entry.data
                mutation.naturalKey = entry.naturalKey
                mutation.attachments = store.table(forEntity: record.entity)?.referencedDigests(inData: entry.data)
            }
            // A delete is checked too: a stale delete must not silently beat another device's edit.
            if detectsConflicts { mutation.baseVersion = version ?? 0 }
            if let problem = mutation.problem() {
                batch.refused.append(RefusedMutation(id: mutation.id, entries: folding, reason: problem))
                continue
            }
            batch.mutations.append(mutation)
            if !entry.sent { batch.firstSent.insert(mutation.id) }
            // The entries coalesced into the mutation are folded into its own: from now on
            // one entry stands for what was sent, so a resend is the same mutation.
            batch.entries[mutation.id] = [mutation.id]
            let folded = folding.filter { $0 != mutation.id }
            batch.unsent += folded
            if !folded.isEmpty { coalesced.append((mutation.id, folded)) }
        }
        batch.mutations.sort { $0.id < $1.id }
        return coalesced
    }

    /// Writes down that `batch` is taken: each kept entry stands for its folded ones (which go,
    /// with the unsent), refused entries become dead letters, the rest are in flight.
    private static func take(_ batch: OutboxBatch, coalesced: [(kept: Int64, folded: [Int64])], db: Database) throws {
        for (kept, folded) in coalesced { try OutboxTable.fold(folded, into: kept, db: db) }
        if !batch.unsent.isEmpty { try OutboxTable.delete(batch.unsent, db: db) }
        for refused in batch.refused {
            try OutboxTable.deadLetter(refused.entries, reason: refused.reason, db: db)
        }
        let sent = batch.entries.values.flatMap { $0 }
        if !sent.isEmpty { try OutboxTable.markInFlight(sent, clientID: batch.clientID, db: db) }
    }

    /// Puts a batch's entries back to pending, to be taken again (after a 413, or when sync stops).
    func release(_ batch: OutboxBatch) async throws {
        let ids = batch.entries.values.flatMap { $0 }
        guard !ids.isEmpty else { return }
        try await store.database.write { db in
            try lease.confirm(db)
            try OutboxTable.release(ids, db: db)
        }
    }

    /// Dead-letters a batch of one mutation that the server refused whole (400 or 413).
    func deadLetter(_ batch: OutboxBatch, reason: String) async throws {
        try await store.database.write { db in
            try lease.confirm(db)
            try OutboxTable.deadLetter(batch.entries.values.flatMap { $0 }, reason: reason, db: db)
        }
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
            let (current, highestSent) = try StoreMeta.sender(db)
            let plan = AnswerPlan(response, to: batch, clientID: current ?? "", highestSent: highestSent)
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
                    case .finish(let written, _, let version, let current):
                        // A write the app's rule rewrote is two: this store's at `version`, the
                        // rule's right after it, which a change queued meanwhile builds on.
                        let ruled = written && version.map { current?.version == $0 + 1 } == true
                        if let version { versions.set(ruled ? version + 1 : version, of: step.serverRecord) }
                        if let current { serverStates.append(ServerState(record: step.serverRecord, state: current, space: mutation.space)) }
                        finished += step.entries
                    case .deadLetter(let reason, let code, let current):
                        try OutboxTable.deadLetter(step.entries, reason: reason, db: db)
                        if let state = try Self.stateAfterRefusal(mutation, code: code, current: current, db: db) {
                            serverStates.append(ServerState(record: own, state: state, space: mutation.space))
                        }
                    case .uploadFirst(let digests):
                        try Self.uploadFirst(step.entries, of: own, digests: digests, db: db)
                    case .resolve(let judged, let current, let absorbsOwn):
                        finished += step.entries
                        // The server has the mutation's own record too: it goes, as a merge would delete it.
                        if absorbsOwn { absorbed.append(own) }
                        try resolve(judged, current: current, policy: policy, resolved: &outcome.resolved, later: &later, versions: &versions, db: db)
                    }
                }
                try Self.returnToQueue(&notOurs, of: plan, finished: &finished, outcome: &outcome, db: db)
                try OutboxTable.rekeyQueuedEntries(rekeys, db: db)
                for record in absorbed {  // queued after the re-keying, which would move them to the holder
                    try OutboxTable.insert(entity: record.entity, entityID: record.entityID, op: .delete, data: nil, naturalKey: nil, db: db)
                }
                try OutboxTable.finish(finished, db: db)
                try adopt(serverStates, versions: &versions, db: db)
            }
            try versions.save(db: db)
            try Self.settleClientID(after: plan, of: batch, returned: notOurs, current: current, highestSent: highestSent, outcome: &outcome, db: db)
            return outcome
        }
        if let change = outcome.newClientID { store.identity.clientID = change.new }
        return outcome
    }

    /// What the row of a refused change shows: the record as the user may still read it (the
    /// dead letter holds what was attempted), or nothing when refused in a space the user cannot
    /// read (the row goes with the refusal); `nil`: the row stays as it is.
    private static func stateAfterRefusal(_ mutation: OutgoingMutation, code: String?, current: RecordState?, db: Database) throws -> RecordState? {
        if let current { return current }
        return try unreadable(mutation, refusedWith: code, db: db) ? .absent : nil
    }

    /// A change the server refused for an attachment it does not hold for this user: queued again
    /// behind its attachments, which wait for upload again; a dead letter naming the record when
    /// the store holds no file of one.
    private static func uploadFirst(_ entries: [Int64], of record: RecordRef, digests: [String], db: Database) throws {
        let missing = try AttachmentTable.uploadAgain(digests, db: db)
        guard let digest = missing.first else {
            return try OutboxTable.requeue(entries, of: record, db: db)
        }
        try OutboxTable.deadLetter(
            entries,
            reason: "\(record.entity) \(record.entityID) references attachment \(digest), which the server does not hold for this user and "
                + "this store has no file of; attach the file again (FerryStore.attach(fileAt:)) and write its digest",
            db: db
        )
    }

    /// Takes a new client id when the answer shows another store holds this one, or entries went
    /// back to the queue below ids already sent under the current one: ids go out increasing
    /// under a client id, and a batch read ahead may already have gone out above them. Else
    /// notes the writes of this store's own the answer acknowledged.
    private static func settleClientID(
        after plan: AnswerPlan,
        of batch: OutboxBatch,
        returned: [Int64],
        current: String?,
        highestSent: Int64,
        outcome: inout BatchOutcome,
        db: Database
    ) throws {
        let reason =
            plan.anotherHolder.map {
                "another store holds client id \(batch.clientID) (a copy of this store on another device, or a backup restored here): \($0)"
            }
            ?? returned.min().flatMap { lowest in
                lowest <= highestSent
                    ? "changes of another holder's client id \(batch.clientID) are back in the queue below ids already sent under client id \(current ?? "")"
                    : nil
            }
        let written = plan.written
        if let reason {
            let clientID = ClientIdentity.newClientID()
            try StoreMeta.renewClientID(clientID, db: db)
            try AnsweredWrites.forgetAll(db)
            outcome.newClientID = (current ?? batch.clientID, clientID, reason)
        } else if plan.underCurrentID, !written.isEmpty {
            // Writes of this store's own, answered: the next pull names them.
            try AnsweredWrites.note(written, db: db)
        }
    }

    /// Puts the entries of mutations answered as another holder's back in the queue, but for
    /// those a later change supersedes (`superseded`), which are finished instead.
    private static func returnToQueue(
        _ entries: inout [Int64],
        of plan: AnswerPlan,
        finished: inout [Int64],
        outcome: inout BatchOutcome,
        db: Database
    ) throws {
        guard !entries.isEmpty else { return }
        let superseded = try Self.superseded(resending: plan, db: db)
        finished += superseded
        entries.removeAll { superseded.contains($0) }
        try OutboxTable.returnToQueue(entries, db: db)
        outcome.returnedToQueue = entries.count
    }

    /// The entries of `plan`'s resent mutations that are done with instead: sent again under a
    /// new client id, each lands after every change answered here, so one whose record a later
    /// change already wrote (in this batch, merges included) or will write (queued) would put
    /// older data over newer.
    private static func superseded(resending plan: AnswerPlan, db: Database) throws -> Set<Int64> {
        let resent = plan.steps.filter { $0.decision == .resend }
        let records = resent.map { RecordRef(entity: $0.mutation.entity, entityID: $0.mutation.entityID) }
        let queued = try OutboxTable.queuedEntries(of: records, db: db)
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

    /// Whether the server refused `mutation` for its space (`code`) in a space this store does not
    /// know it may read: no membership of that incarnation in the latest pull. (One it knows
    /// goes at the pull that revokes it; a readable one comes with the server's `current`.)
    private static func unreadable(_ mutation: OutgoingMutation, refusedWith code: String?, db: Database) throws -> Bool {
        guard let space = mutation.space, [ErrorCode.forbidden.rawValue, ErrorCode.spaceDeleted.rawValue].contains(code) else { return false }
        guard let known = try SpaceMemberships.held(space, db: db) else { return true }
        return mutation.spaceIncarnation != nil && known.incarnation != nil && known.incarnation != mutation.spaceIncarnation
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
        // A state the app's schema refuses is skipped here, not failed at the answer's commit.
        let deferred = try RecordWriter.checkForeignKeysNow(db)
        defer { RecordWriter.deferForeignKeys(again: deferred, db: db) }
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
                        placement: SpacePlacement(server: server.space),
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
        Set(try OutboxTable.queuedEntries(of: records, db: db).keys)
    }
}
