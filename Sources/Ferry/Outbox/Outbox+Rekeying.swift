import FerryProtocol
import Foundation
import GRDB

/// Re-keying a record to the id the server holds it under, and ending conflicts as the policy says.
extension Outbox {
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
    func rekey(
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
