import FerryProtocol
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
        var keys: Set<RecordKey> = []
        var naturalKeys: Set<NaturalKeyRef> = []
    }

    /// What the storage must write for a batch.
    struct BatchPlan {
        var response: PushResponse
        /// Final state of every record the batch changed, in the order of their last change.
        var writes: [StoredRecord]
        /// Records that held a live natural key before the batch and no longer hold it; the
        /// storage releases these keys before writing so the uniqueness index never sees two holders.
        var releasedNaturalKeys: [RecordKey]
    }

    static func lookups(for mutations: [IncomingMutation]) -> Lookups {
        var lookups = Lookups()
        for incoming in mutations {
            let mutation = incoming.mutation
            lookups.keys.insert(RecordKey(entity: mutation.entity, entityID: mutation.entityID))
            if let naturalKey = mutation.naturalKey {
                lookups.naturalKeys.insert(NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey))
            }
        }
        return lookups
    }

    private let initialLastMutationID: Int64
    private let initial: [RecordKey: StoredRecord]
    private var records: [RecordKey: StoredRecord]
    private var naturalKeyHolders: [NaturalKeyRef: RecordKey] = [:]
    private var lastTouch: [RecordKey: Int] = [:]

    /// - Parameters:
    ///   - lastMutationID: the client's stored `lastMutationID` (0 for a new client).
    ///   - loaded: every record found by `lookups(for:)`.
    init(lastMutationID: Int64, loaded: [StoredRecord]) {
        self.initialLastMutationID = lastMutationID
        var records: [RecordKey: StoredRecord] = [:]
        for record in loaded {
            records[record.key] = record
            if let naturalKey = record.liveNaturalKey { naturalKeyHolders[naturalKey] = record.key }
        }
        self.initial = records
        self.records = records
    }

    mutating func plan(_ mutations: [IncomingMutation]) -> BatchPlan {
        var results: [PushResult] = []
        results.reserveCapacity(mutations.count)
        for (index, incoming) in mutations.enumerated() {
            results.append(decide(incoming, at: index))
        }
        let lastMutationID = max(initialLastMutationID, mutations.last?.mutation.id ?? 0)
        let writes = lastTouch.sorted { $0.value < $1.value }.compactMap { records[$0.key] }
        let released = writes.compactMap { final -> RecordKey? in
            guard let before = initial[final.key], let held = before.liveNaturalKey, final.liveNaturalKey != held else {
                return nil
            }
            return final.key
        }
        return BatchPlan(
            response: PushResponse(lastMutationID: lastMutationID, results: results),
            writes: writes, releasedNaturalKeys: released
        )
    }

    private mutating func decide(_ incoming: IncomingMutation, at index: Int) -> PushResult {
        let mutation = incoming.mutation
        if mutation.id <= initialLastMutationID { return duplicate(mutation) }
        if let reason = incoming.rejection {
            return PushResult(id: mutation.id, status: .rejected, entityID: nil, version: nil, error: reason)
        }
        switch mutation.op {
        case .upsert: return upsert(mutation, data: incoming.encodedData, at: index)
        case .delete: return delete(mutation, at: index)
        }
    }

    /// Already processed: report the record as it is now, found by natural key when the
    /// mutation has one, so a client whose response was lost still learns a merge's identity.
    private func duplicate(_ mutation: Mutation) -> PushResult {
        let record: StoredRecord?
        if let naturalKey = mutation.naturalKey {
            record = naturalKeyHolders[NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey)].flatMap { records[$0] }
        } else {
            record = records[RecordKey(entity: mutation.entity, entityID: mutation.entityID)]
        }
        guard let record, !record.deleted else {
            return PushResult(id: mutation.id, status: .duplicate, entityID: nil, version: nil)
        }
        return PushResult(id: mutation.id, status: .duplicate, entityID: record.entityID, version: record.version)
    }

    private mutating func upsert(_ mutation: Mutation, data: Data?, at index: Int) -> PushResult {
        var key = RecordKey(entity: mutation.entity, entityID: mutation.entityID)
        var merged = false
        if let naturalKey = mutation.naturalKey,
            let holder = naturalKeyHolders[NaturalKeyRef(entity: mutation.entity, naturalKey: naturalKey)],
            holder != key
        {
            key = holder
            merged = true
        }
        let existing = records[key]
        if let baseVersion = mutation.baseVersion, baseVersion != (existing?.version ?? 0) {
            // A tombstone still exists (with its version), so 0 conflicts with it too.
            return PushResult(
                id: mutation.id, status: .conflict, entityID: key.entityID, version: existing?.version,
                current: try? existing?.state()
            )
        }
        var naturalKey = mutation.naturalKey ?? existing?.naturalKey
        if let kept = naturalKey, mutation.naturalKey == nil,
            let holder = naturalKeyHolders[NaturalKeyRef(entity: key.entity, naturalKey: kept)], holder != key
        {
            // Reviving a tombstone whose natural key another record has taken since: it gives the key up.
            naturalKey = nil
        }
        let record = StoredRecord(
            entity: key.entity, entityID: key.entityID, version: (existing?.version ?? 0) + 1,
            deleted: false, naturalKey: naturalKey, data: data
        )
        store(record, replacing: existing, at: index)
        return PushResult(id: mutation.id, status: merged ? .merged : .applied, entityID: key.entityID, version: record.version)
    }

    private mutating func delete(_ mutation: Mutation, at index: Int) -> PushResult {
        let key = RecordKey(entity: mutation.entity, entityID: mutation.entityID)
        guard var record = records[key] else {
            // Nothing to delete and nothing to tell other clients: no tombstone.
            return PushResult(id: mutation.id, status: .applied, entityID: key.entityID, version: nil)
        }
        let existing = record
        record.version += 1
        record.deleted = true
        record.data = nil
        store(record, replacing: existing, at: index)
        return PushResult(id: mutation.id, status: .applied, entityID: key.entityID, version: record.version)
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
