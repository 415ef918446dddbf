import FerryProtocol
import FerryRules
import Foundation

/// The push rules of PROTOCOL.md as pure logic over the records a batch touches.
///
/// A storage engine loads those records with a few set-based queries
/// (`lookups(for:)`), lets the planner decide every result in request order,
/// then writes `BatchPlan.writes` in one transaction. Keeping the rules here
/// means every engine applies them identically.
struct BatchPlanner {
    /// Which records a batch may read: by identity, and live holders of natural keys.
    struct Lookups {
        var keys: Set<RecordRef> = []
        var naturalKeys: Set<NaturalKeyRef> = []
    }

    /// What the storage must write for a batch.
    struct BatchPlan {
        var response: PushResponse
        /// Final state of every record the batch changed, in the order of their last change.
        var writes: [StoredRecord]
        /// Records that held a live natural key before the batch and no longer hold it; the
        /// storage releases these keys before writing so the uniqueness index never sees two holders.
        var releasedNaturalKeys: [RecordRef]
        /// The attachments each written record references now, for the records whose upserts said
        /// (`Mutation/attachments`), and none for a tombstone; the others keep theirs.
        var references: [RecordRef: [String]] = [:]
        /// Deleted records restored by an upsert that names no attachments (a client that knows
        /// none): the references their deletion released are theirs again.
        var revivedReferences: [RecordRef] = []
        /// What the app's rules asked to do outside the database for the writes applied.
        var effects: [PendingEffect] = []
    }

    /// - Parameter replays: the results kept for resent mutations; a replayed conflict reports
    ///   its record as it is now, so that record is read too.
    /// - Parameter judge: the app's rules; the records they read are read too.
    static func lookups(for mutations: [IncomingMutation], replays: [Int64: RecentResults.Kept] = [:], judge: RuleJudge? = nil) -> Lookups {
        var lookups = Lookups()
        // A mutation naming a value no database text can hold (NUL, refused by the protocol's
        // rules) is rejected unread: PostgreSQL cannot even compare it.
        for incoming in mutations where !incoming.mutation.namesNUL {
            if let kept = replays[incoming.mutation.id], kept.status == .conflict || kept.rewritten,
                let entityID = kept.result(for: incoming.mutation).entityID
            {
                lookups.keys.insert(RecordRef(entity: incoming.mutation.entity, entityID: entityID))
            }
            let mutation = incoming.mutation
            lookups.keys.insert(RecordRef(entity: mutation.entity, entityID: mutation.entityID))
            if let judge, incoming.rejection == nil {
                for record in judge.reads(for: mutation) where !(record.entity + record.entityID).utf8.contains(0) { lookups.keys.insert(record) }
            }
            if let naturalKey = mutation.naturalKey {
                lookups.naturalKeys.insert(NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey))
            }
        }
        return lookups
    }

    private let initialLastMutationID: Int64
    private let clientID: String
    private let now: Int64
    private let replays: [Int64: RecentResults.Kept]
    private let initial: [RecordRef: StoredRecord]
    private var records: [RecordRef: StoredRecord]
    private var naturalKeyHolders: [NaturalKeyRef: RecordRef] = [:]
    private var lastTouch: [RecordRef: Int] = [:]
    private var references: [RecordRef: [String]] = [:]
    private var revived: Set<RecordRef> = []
    private let judge: RuleJudge?
    private var effects: [PendingEffect] = []

    /// - Parameters:
    ///   - clientID: the pushing client, recorded as the writer of what its mutations write.
    ///   - lastMutationID: the client's stored `lastMutationID` (0 for a new client).
    ///   - replays: the results the client's recent pushes got, by mutation id.
    ///   - loaded: every record found by `lookups(for:replays:)`.
    ///   - now: the server's clock in milliseconds since 1970, the `changedAt` of a mutation without one.
    init(
        clientID: String,
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept] = [:],
        loaded: [StoredRecord],
        judge: RuleJudge? = nil,
        now: Int64 = serverMilliseconds()
    ) {
        self.judge = judge
        self.clientID = clientID
        self.now = now
        self.initialLastMutationID = lastMutationID
        self.replays = replays
        var records: [RecordRef: StoredRecord] = [:]
        for record in loaded {
            records[record.key] = record
            if let naturalKey = record.liveNaturalKey { naturalKeyHolders[naturalKey] = record.key }
        }
        self.initial = records
        self.records = records
    }

    /// Decides every result in request order. Throws ``RuleUnavailable`` when one of the app's
    /// rules says "not now": the push then applies nothing.
    mutating func plan(_ mutations: [IncomingMutation]) throws(RuleUnavailable) -> BatchPlan {
        var results: [PushResult] = []
        results.reserveCapacity(mutations.count)
        for (index, incoming) in mutations.enumerated() {
            results.append(try decide(incoming, at: index))
        }
        let lastMutationID = max(initialLastMutationID, mutations.last?.mutation.id ?? 0)
        let writes = lastTouch.sorted { $0.value < $1.value }.compactMap { records[$0.key] }
        let released = writes.compactMap { final -> RecordRef? in
            guard let before = initial[final.key], let held = before.liveNaturalKey, final.liveNaturalKey != held else {
                return nil
            }
            return final.key
        }
        return BatchPlan(
            response: PushResponse(lastMutationID: lastMutationID, results: results),
            writes: writes,
            releasedNaturalKeys: released,
            references: references,
            revivedReferences: revived.sorted { ($0.entity, $0.entityID) < ($1.entity, $1.entityID) },
            effects: effects
        )
    }

    private mutating func decide(_ incoming: IncomingMutation, at index: Int) throws(RuleUnavailable) -> PushResult {
        let mutation = incoming.mutation
        if mutation.id <= initialLastMutationID { return replay(incoming) ?? duplicate(mutation) }
        if let reason = incoming.rejection {
            return PushResult(id: mutation.id, status: .rejected, entityID: nil, version: nil, error: reason)
        }
        // A conflict is the client's policy's to decide, before any rule: the rule judges the
        // write that would be applied, against the record it would be applied to.
        guard let judge, judge.judges(mutation.entity), !conflicts(mutation) else { return apply(incoming, at: index) }
        let target = target(of: mutation).key
        // Read in place: a copy of `records` per judged write would cost a batch its square.
        let verdict = try judge.judge(incoming, target: target, current: try? records[target]?.state(), read: { try? records[$0]?.state() })
        switch verdict {
        case .accept(let asked):
            let result = apply(incoming, at: index)
            if result.status == .applied || result.status == .merged, result.version != nil { effects += asked }
            return result
        case .refuse(let result):
            return result
        case .rewrite(let rewritten, let asked):
            var result = apply(rewritten, at: index)
            if result.status == .applied || result.status == .merged, result.version != nil { effects += asked }
            if result.status == .applied || result.status == .merged, let entityID = result.entityID {
                let key = RecordRef(entity: mutation.entity, entityID: entityID)
                // Two writes in one: the client's at `version`, the rule's after it, which is what
                // is stored. The answer's `current` carries it; a client that does not take
                // `current` (one older than rules) knows `version` only, and pulls the next one,
                // which a pull does not leave out as the client's own write.
                self.records[key]?.version += 1
                self.records[key]?.writtenBy = nil
                result.current = try? self.records[key]?.state()
            }
            return result
        }
    }

    private mutating func apply(_ incoming: IncomingMutation, at index: Int) -> PushResult {
        switch incoming.mutation.op {
        case .upsert: upsert(incoming.mutation, data: incoming.encodedData, at: index)
        case .delete: delete(incoming.mutation, at: index)
        }
    }

    /// A resent mutation whose first result is kept: that result again, word for word, so a
    /// client whose answer was lost learns what its mutation did (a version it wrote, a merge,
    /// a conflict, a rejection). A conflict, and a write the app's rule rewrote, report the record
    /// as it is now.
    private func replay(_ incoming: IncomingMutation) -> PushResult? {
        let mutation = incoming.mutation
        guard let kept = replays[mutation.id], kept.status != .duplicate else { return nil }
        guard kept.answers(incoming) else {
            return PushResult(
                id: mutation.id,
                status: .rejected,
                entityID: nil,
                version: nil,
                error: "this client already used mutation id \(mutation.id) for another change; ids must never be reused "
                    + "(a store copied to another device, or restored from a backup, needs a client id of its own)",
                code: PushResult.mutationIDReused
            )
        }
        var result = kept.result(for: mutation)
        let record = result.entityID.flatMap { records[RecordRef(entity: mutation.entity, entityID: $0)] }
        if result.status == .conflict {
            result.version = record?.version
            result.current = try? record?.state()
        } else if kept.rewritten {
            result.current = try? record?.state()  // what the rule stored, or what came after it
        } else if result.status == .rejected, RecentResults.isRuleCode(result.code) {
            // The record as the server holds it, which the client takes back, as the first time.
            result.current = (try? records[RecordRef(entity: mutation.entity, entityID: mutation.entityID)]?.state()) ?? .absent
        }
        return result
    }

    /// Already processed, and its result no longer kept (or the id was never sent on its own:
    /// a client coalesced it into a later one). Nothing is claimed about what it did: `version`
    /// is null, and `current` is the record as it is now, found by natural key when the
    /// mutation has one, so the client can take the server's state.
    private func duplicate(_ mutation: Mutation) -> PushResult {
        let record: StoredRecord?
        if let naturalKey = mutation.naturalKey {
            record =
                naturalKeyHolders[NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey)].flatMap { records[$0] }
                ?? records[RecordRef(entity: mutation.entity, entityID: mutation.entityID)]
        } else {
            record = records[RecordRef(entity: mutation.entity, entityID: mutation.entityID)]
        }
        return PushResult(id: mutation.id, status: .duplicate, entityID: record?.entityID, version: nil, current: try? record?.state())
    }

    /// The record `mutation` writes: its own, or for an upsert the live holder of its natural
    /// key (`merged`).
    private func target(of mutation: Mutation) -> (key: RecordRef, merged: Bool) {
        let own = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
        guard mutation.op == .upsert, let naturalKey = mutation.naturalKey,
            let holder = naturalKeyHolders[NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey)], holder != own
        else { return (own, false) }
        return (holder, true)
    }

    /// Whether `mutation` is a conflict (its base version is not its target's), which the
    /// client's policy decides, not the app's rules.
    private func conflicts(_ mutation: Mutation) -> Bool {
        guard let baseVersion = mutation.baseVersion else { return false }
        let (key, merged) = target(of: mutation)
        return merged || baseVersion != (records[key]?.version ?? 0)
    }

    private mutating func upsert(_ mutation: Mutation, data: Data?, at index: Int) -> PushResult {
        let (key, merged) = target(of: mutation)
        let existing = records[key]
        // A conflict-checked upsert whose natural key another record holds was written without
        // seeing that record (its base version is its own record's): never merged blindly, it
        // is a conflict against the holder, which the client's policy decides (PROTOCOL.md).
        if let baseVersion = mutation.baseVersion, merged || baseVersion != (existing?.version ?? 0) {
            // A tombstone still exists (with its version), so 0 conflicts with it too.
            return PushResult(
                id: mutation.id,
                status: .conflict,
                entityID: key.entityID,
                version: existing?.version,
                current: try? existing?.state()
            )
        }
        // Without a natural key an upsert keeps the record's own; a tombstone holds none.
        let record = StoredRecord(
            entity: key.entity,
            entityID: key.entityID,
            version: (existing?.version ?? 0) + 1,
            deleted: false,
            naturalKey: mutation.naturalKey ?? existing?.naturalKey,
            data: data,
            changedAt: mutation.changedAt ?? now,
            writtenBy: clientID,
            writtenMutation: mutation.id
        )
        store(record, replacing: existing, at: index)
        if let attachments = mutation.attachments {
            references[key] = Array(Set(attachments)).sorted()
            revived.remove(key)
        } else if existing?.deleted == true, references.removeValue(forKey: key) == nil {
            // Deleted before this batch: what its deletion released is the restored record's again.
            revived.insert(key)
        }
        if merged {
            // The mutation's own record, if the server has it live, is the same thing as the
            // key's holder: it is merged into the holder and deleted, so every device ends with
            // one record (a device that already had both learns of the deletion by pull).
            let own = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
            if let absorbed = records[own], !absorbed.deleted { tombstone(absorbed, by: mutation, at: index) }
        }
        return PushResult(id: mutation.id, status: merged ? .merged : .applied, entityID: key.entityID, version: record.version)
    }

    private mutating func delete(_ mutation: Mutation, at index: Int) -> PushResult {
        let key = RecordRef(entity: mutation.entity, entityID: mutation.entityID)
        if let baseVersion = mutation.baseVersion, baseVersion != (records[key]?.version ?? 0) {
            // A delete of a record that changed since the client saw it: the client's policy decides.
            return PushResult(
                id: mutation.id,
                status: .conflict,
                entityID: key.entityID,
                version: records[key]?.version,
                current: try? records[key]?.state()
            )
        }
        guard let record = records[key] else {
            // Nothing to delete and nothing to tell other clients: no tombstone.
            return PushResult(id: mutation.id, status: .applied, entityID: key.entityID, version: nil)
        }
        return PushResult(id: mutation.id, status: .applied, entityID: key.entityID, version: tombstone(record, by: mutation, at: index))
    }

    /// Deletes `record`, leaving a tombstone that gives up its natural key: a key belongs to
    /// live records only, so a later record may take it and a revived one does not clash.
    @discardableResult
    private mutating func tombstone(_ record: StoredRecord, by mutation: Mutation, at index: Int) -> Int64 {
        var tombstone = record
        tombstone.version += 1
        tombstone.deleted = true
        tombstone.data = nil
        tombstone.naturalKey = nil
        tombstone.changedAt = mutation.changedAt ?? now
        tombstone.writtenBy = clientID
        tombstone.writtenMutation = mutation.id
        store(tombstone, replacing: record, at: index)
        // A deleted record references nothing: its attachments are released (readable for a
        // grace period, then purged unless something else holds them).
        references[record.key] = []
        return tombstone.version
    }

    private mutating func store(_ record: StoredRecord, replacing existing: StoredRecord?, at index: Int) {
        if let held = existing?.liveNaturalKey, naturalKeyHolders[held] == record.key {
            naturalKeyHolders[held] = nil
        }
        if let held = record.liveNaturalKey { naturalKeyHolders[held] = record.key }
        records[record.key] = record
        lastTouch[record.key] = index
    }
}

extension Mutation {
    /// Whether its entity, id or natural key holds U+0000.
    var namesNUL: Bool {
        // U+0000 is the only scalar whose UTF-8 holds a zero byte.
        entity.utf8.contains(0) || entityID.utf8.contains(0) || naturalKey?.utf8.contains(0) == true
    }
}
