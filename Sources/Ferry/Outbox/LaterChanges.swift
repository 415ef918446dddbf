import FerryProtocol
import Foundation
import GRDB

/// The queued entry ids of the records a batch's answer re-keys or reports in conflict, read
/// in one statement per batch (`OutboxTable.queuedEntries`), so each result can ask what this store
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
        ids = try OutboxTable.queuedEntries(of: records, db: db)
    }

    /// The id of the newest entry of `record` after `id`, if any.
    func newest(of record: RecordRef, after id: Int64) -> Int64? {
        ids[record]?.filter { $0 > id }.max()
    }

    /// A change of `record` queued while the batch's answer is applied (a kept conflict's resend).
    mutating func add(_ id: Int64, of record: RecordRef) {
        ids[record, default: []].append(id)
    }

    /// `record`'s entries after `id` now change `canonical` (`OutboxTable.rekeyQueuedEntries` moves them
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
