import FerryProtocol
import Foundation
import GRDB

/// Re-keying a record to the id the server holds it under, and ending conflicts as the policy says.
extension Outbox {
    /// The local record takes the server's identity (`RecordWriter.rekey`). The server now holds
    /// this client's data under the canonical id, so a stale local copy of the canonical record
    /// (pulled earlier) gives way to the re-keyed row; its later pending edits follow it
    /// (`rekeyQueuedEntries`). But when this store changed the canonical record after the merged
    /// mutation, and more recently than it changed the merged row, that change reaches the server
    /// last and decides the record: the local canonical row (or its absence) stays, and the
    /// merged row goes.
    func rekey(
        entity: String,
        from local: String,
        to canonical: String,
        after mutationID: Int64,
        later: LaterChanges,
        children: inout ForeignKeyChildren,
        db: Database
    ) throws {
        let canonicalWins =
            later.newest(of: RecordRef(entity: entity, entityID: canonical), after: mutationID).map {
                $0 > later.newest(of: RecordRef(entity: entity, entityID: local), after: mutationID) ?? 0
            } ?? false
        try RecordWriter(store: store).rekey(entity: entity, from: local, to: canonical, canonicalWins: canonicalWins, children: &children, db: db)
    }

    /// Ends a conflict as `policy` says. Changes of the record queued after the conflicting one
    /// were made on the same stale knowledge: the policy sees the newest of them as the local
    /// state, and its decision replaces them all (else they would be sent over the server's
    /// version afterwards and silently undo an accepted server state or a merge).
    func resolve(
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
            let entry = try OutboxTable.entry(newest, db: db)
        {
            local = try OutgoingMutation(id: newest, entity: mutation.entity, entityID: mutation.entityID, op: entry.op, dataText: entry.data).data()
            changedAt = OutgoingMutation.milliseconds(entry.changedAt) ?? changedAt
            let ids = later.take(of: record, after: mutation.id)
            try OutboxTable.remove(
                where: "state = \(OutboxState.pending.rawValue) AND \(OutboxTable.idIn)",
                arguments: [OutboxTable.idList(ids)],
                db: db
            )
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
                placement: SpacePlacement(server: mutation.space),
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
                placement: SpacePlacement(server: mutation.space),
                db: db
            )
            let text = try data.map { String(decoding: try ProtocolValidation.encode($0), as: UTF8.self) }
            // Queued with the local change's time: the resolution is that change, sent again.
            try OutboxTable.insert(
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
