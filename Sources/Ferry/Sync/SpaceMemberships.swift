import FerryProtocol
import Foundation
import GRDB

/// What the store keeps of the user's spaces, and what leaving one does to it.
enum SpaceMemberships {
    /// What a page changed: the spaces joined and what each revocation removed.
    struct Changes: Sendable {
        var joined: [Membership] = []
        var roleChanged: [(membership: Membership, from: SpaceRole)] = []
        var revoked: [(space: String, removed: Int, deadLettered: Int)] = []
    }

    /// The memberships the store last saw, sorted by space.
    static func read(_ db: Database) throws -> [Membership] {
        try Row.fetchAll(db, sql: "SELECT space, role, incarnation FROM ferry_spaces ORDER BY space").map {
            Membership(space: $0[0], role: SpaceRole(rawValue: $0[1]) ?? .read, incarnation: $0[2])
        }
    }

    /// Applies a page's `revoked` and `spaces`, before its changes, in its transaction: each
    /// revoked space's rows leave the store without capture (with their versions, kept fields
    /// and set-aside copies), and its changes still queued (not in flight: those get the
    /// server's answer) become dead letters with the reason, never silently dropped. A space
    /// the page names with another incarnation than the store's was deleted and created again
    /// under its id: it is another space, so the old one is revoked and the new one joined, even
    /// when the page's cursor did not name the old one. Then the memberships are the page's,
    /// which the guard triggers read.
    static func apply(_ page: PullResponse, store: FerryStore, db: Database) throws -> Changes {
        var changes = Changes()
        let before = Dictionary(try read(db).map { ($0.space, $0) }, uniquingKeysWith: { $1 })
        var revoked = page.revoked
        for membership in page.spaces ?? [] {
            guard let known = before[membership.space]?.incarnation, let incarnation = membership.incarnation, known != incarnation,
                !revoked.contains(membership.space)
            else { continue }
            revoked.append(membership.space)
        }
        for space in revoked {
            changes.revoked.append(try revoke(space, store: store, db: db))
        }
        // Left out: the memberships the cursor was read with, which the store keeps.
        guard let spaces = page.spaces else { return changes }
        try db.execute(sql: "DELETE FROM ferry_spaces")
        let insert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_spaces (space, role, incarnation) VALUES (?, ?, ?)")
        for membership in spaces {
            try insert.execute(arguments: [membership.space, membership.role.rawValue, membership.incarnation])
            try noteIncarnation(of: membership, db: db)
            if let old = before[membership.space], !revoked.contains(membership.space), old.role != membership.role {
                changes.roleChanged.append((membership, old.role))
            }
            if before[membership.space] == nil || revoked.contains(membership.space) {
                changes.joined.append(membership)
                // A join sends no tombstones: rows the store holds of the space already (written
                // here before the join) are checked against what the join brings (`noteJoins`,
                // `finishJoins`).
                if try noteCandidates(of: membership.space, store: store, db: db) {
                    try db.execute(sql: "INSERT OR IGNORE INTO ferry_joins (space) VALUES (?)", arguments: [membership.space])
                }
            }
        }
        // The guards name the read-only spaces in their messages.
        if Dictionary(spaces.map { ($0.space, $0.role) }, uniquingKeysWith: { $1 }) != before.mapValues(\.role) {
            try ChangeCapture.reinstallGuards(for: store.tables, in: db)
        }
        return changes
    }

    /// Keeps the incarnation of `membership`'s space as the last one of its id this store saw.
    static func noteIncarnation(of membership: Membership, db: Database) throws {
        guard let incarnation = membership.incarnation else { return }
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_space_incarnations (space, incarnation) VALUES (?, ?)")
            .execute(arguments: [membership.space, incarnation])
    }

    /// Notes the records of spaces being joined that a page brought.
    static func noteJoins(_ changes: [Change], db: Database) throws {
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_joins)")) == true else { return }
        let statement = try db.cachedStatement(
            sql: """
                INSERT OR IGNORE INTO ferry_join_seen (space, entity, entity_id)
                SELECT space, ?2, ?3 FROM ferry_joins WHERE space = ?1
                """
        )
        for change in changes {
            guard let space = change.space else { continue }
            try statement.execute(arguments: [space, change.entity, change.entityID])
        }
    }

    /// Ends the joins of a pull that is caught up: the rows of each joined space that the join
    /// did not bring (deleted by another member before this device joined, whose tombstones a
    /// join does not send) leave the store uncaptured, with their versions. Only the join's
    /// candidates (`noteCandidates`) may leave, and of those not one with changes queued or set
    /// aside as dead letters, nor one whose version the store learned since (a push of this
    /// device answered: the server leaves such writes out of a pull once its cursor has joined
    /// the space). Returns how many left.
    static func finishJoins(store: FerryStore, db: Database) throws -> Int {
        let spaces = try String.fetchAll(db, sql: "SELECT space FROM ferry_joins")
        var writer = RecordWriter(store: store)
        var removed = 0
        for space in spaces {
            let unseen = selections(of: space, in: store).map { selection in
                let table = selection.table
                // Qualified: inside the subqueries an unqualified `id` or `entity` is theirs.
                let quoted = table.table.quotedDatabaseIdentifier
                let entity = table.entityColumn.map { "\(quoted).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral
                let key = "CAST(\(quoted).\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT)"
                return RecordWriter.Selection(
                    table: table,
                    condition: """
                        \(selection.condition) AND EXISTS (SELECT 1 FROM ferry_join_candidates c WHERE c.space = \(space.sqlLiteral)
                            AND c.entity = \(entity) AND c.entity_id = \(key)
                            AND c.version IS (SELECT v.version FROM ferry_versions v WHERE v.entity = c.entity AND v.entity_id = c.entity_id))
                        AND NOT EXISTS (SELECT 1 FROM ferry_join_seen s WHERE s.space = \(space.sqlLiteral)
                            AND s.entity = \(entity) AND s.entity_id = \(key))
                        AND NOT EXISTS (SELECT 1 FROM ferry_outbox o WHERE o.entity = \(entity) AND o.entity_id = \(key)
                            AND o.state != \(OutboxState.highWaterMark.rawValue))
                        """,
                    arguments: selection.arguments
                )
            }
            removed += try FerryStore.withoutCapture(db) { try writer.remove(unseen, db: db) }.total
        }
        try db.execute(sql: "DELETE FROM ferry_join_seen")
        try db.execute(sql: "DELETE FROM ferry_join_candidates")
        try db.execute(sql: "DELETE FROM ferry_joins")
        return removed
    }

    /// The rows of `space`: the tables placed in it, each with the condition selecting its rows.
    private static func selections(of space: String, in store: FerryStore) -> [RecordWriter.Selection] {
        store.tables.compactMap { table in
            switch table.space {
            case .personal: nil
            case .named(let named): named == space ? RecordWriter.Selection(table: table, condition: "1") : nil
            case .column(let column): RecordWriter.Selection(table: table, condition: "\(column.quotedDatabaseIdentifier) = ?", arguments: [space])
            }
        }
    }

    /// Notes, as a join of `space` begins, the rows the store holds of it with no change queued,
    /// each with the version the store knows: what the join's sweep may remove if the join does
    /// not bring it (`finishJoins`). Returns whether there are any.
    private static func noteCandidates(of space: String, store: FerryStore, db: Database) throws -> Bool {
        var noted = 0
        for selection in selections(of: space, in: store) {
            let (table, condition, arguments) = (selection.table, selection.condition, selection.arguments)
            // Qualified: inside the subqueries an unqualified `id` or `entity` is theirs.
            let quoted = table.table.quotedDatabaseIdentifier
            let entity = table.entityColumn.map { "\(quoted).\($0.quotedDatabaseIdentifier)" } ?? table.entity.sqlLiteral
            let key = "CAST(\(quoted).\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT)"
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO ferry_join_candidates (space, entity, entity_id, version)
                    SELECT \(space.sqlLiteral), \(entity), \(key),
                        (SELECT v.version FROM ferry_versions v WHERE v.entity = \(entity) AND v.entity_id = \(key))
                    FROM \(table.table.quotedDatabaseIdentifier) WHERE \(condition)
                        AND NOT EXISTS (SELECT 1 FROM ferry_outbox o WHERE o.entity = \(entity) AND o.entity_id = \(key)
                            AND o.state != \(OutboxState.highWaterMark.rawValue))
                    """,
                arguments: arguments
            )
            noted += db.changesCount
        }
        return noted > 0
    }

    private static func revoke(_ space: String, store: FerryStore, db: Database) throws -> (space: String, removed: Int, deadLettered: Int) {
        var writer = RecordWriter(store: store)
        let removal = try FerryStore.withoutCapture(db) { try writer.remove(selections(of: space, in: store), db: db) }
        try db.execute(sql: "DELETE FROM ferry_set_aside WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_joins WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_seen WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_candidates WHERE space = ?", arguments: [space])
        // Records of the space whose rows the app already deleted have no row above, only their
        // changes: their versions go too, or a grant that brings the space whole again would
        // find them known at the version it sends and skip them.
        try db.execute(
            sql: "DELETE FROM ferry_versions WHERE (entity, entity_id) IN (SELECT entity, entity_id FROM ferry_outbox WHERE space = ?)",
            arguments: [space]
        )
        try db.execute(
            sql: "UPDATE ferry_outbox SET state = ?, error = ? WHERE space = ? AND state = ?",
            arguments: [
                OutboxState.deadLettered.rawValue,
                "space '\(space)' was revoked: this user is no longer a member, or the space was deleted; the change was not sent",
                space, OutboxState.pending.rawValue,
            ]
        )
        return (space, removal.total, db.changesCount)
    }
}
