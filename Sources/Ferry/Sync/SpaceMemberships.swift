import FerryProtocol
import Foundation
import GRDB

/// What the store keeps of the user's spaces, and what leaving one does to it.
enum SpaceMemberships {
    /// What a page changed: the spaces joined and what each revocation removed.
    struct Changes: Sendable {
        var joined: [Membership] = []
        var revoked: [(space: String, removed: Int, deadLettered: Int)] = []
    }

    /// The memberships the store last saw, sorted by space.
    static func read(_ db: Database) throws -> [Membership] {
        try Row.fetchAll(db, sql: "SELECT space, role FROM ferry_spaces ORDER BY space").map {
            Membership(space: $0[0], role: SpaceRole(rawValue: $0[1]) ?? .read)
        }
    }

    /// Applies a page's `revoked` and `spaces`, before its changes, in its transaction: each
    /// revoked space's rows leave the store without capture (with their versions, kept fields
    /// and set-aside copies), and its changes still queued (not in flight: those get the
    /// server's answer) become dead letters with the reason, never silently dropped. Then the
    /// memberships are the page's, which the guard triggers read.
    static func apply(_ page: PullResponse, store: FerryStore, db: Database) throws -> Changes {
        var changes = Changes()
        let before = Dictionary(try read(db).map { ($0.space, $0.role) }, uniquingKeysWith: { $1 })
        for space in page.revoked {
            changes.revoked.append(try revoke(space, store: store, db: db))
        }
        // Left out: the memberships the cursor was read with, which the store keeps.
        guard let spaces = page.spaces else { return changes }
        try db.execute(sql: "DELETE FROM ferry_spaces")
        let insert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_spaces (space, role) VALUES (?, ?)")
        for membership in spaces {
            try insert.execute(arguments: [membership.space, membership.role.rawValue])
            if before[membership.space] == nil {
                changes.joined.append(membership)
                // A join sends no tombstones: rows the store holds of the space already (written
                // here before the join) are checked against what the join brings (`noteJoins`,
                // `finishJoins`).
                if try holdsRows(of: membership.space, store: store, db: db) {
                    try db.execute(sql: "INSERT OR IGNORE INTO ferry_joins (space) VALUES (?)", arguments: [membership.space])
                }
            }
        }
        // The guards name the read-only spaces in their messages.
        if Dictionary(spaces.map { ($0.space, $0.role) }, uniquingKeysWith: { $1 }) != before {
            try ChangeCapture.reinstallGuards(for: store.tables, in: db)
        }
        return changes
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
    /// join does not send) leave the store uncaptured, with their versions, except those with
    /// changes queued or set aside as dead letters. Returns how many left.
    static func finishJoins(store: FerryStore, db: Database) throws -> Int {
        let spaces = try String.fetchAll(db, sql: "SELECT space FROM ferry_joins")
        var removed = 0
        for space in spaces {
            try FerryStore.withoutCapture(db) {
                for (table, condition, arguments) in rows(of: space, in: store) {
                    let entity = table.entityColumn.map(\.quotedDatabaseIdentifier) ?? table.entity.sqlLiteral
                    let key = "CAST(\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT)"
                    let unseen = """
                        \(condition) AND NOT EXISTS (SELECT 1 FROM ferry_join_seen s WHERE s.space = \(space.sqlLiteral)
                            AND s.entity = \(entity) AND s.entity_id = \(key))
                        AND NOT EXISTS (SELECT 1 FROM ferry_outbox o WHERE o.entity = \(entity) AND o.entity_id = \(key)
                            AND o.state != \(OutboxState.highWaterMark.rawValue))
                        """
                    let quoted = table.table.quotedDatabaseIdentifier
                    try db.execute(
                        sql: "DELETE FROM ferry_versions WHERE (entity, entity_id) IN (SELECT \(entity), \(key) FROM \(quoted) WHERE \(unseen))",
                        arguments: arguments
                    )
                    try db.execute(sql: "DELETE FROM \(quoted) WHERE \(unseen)", arguments: arguments)
                    removed += db.changesCount
                }
            }
        }
        try db.execute(sql: "DELETE FROM ferry_join_seen")
        try db.execute(sql: "DELETE FROM ferry_joins")
        return removed
    }

    /// The tables placed in `space` and the condition selecting its rows in each.
    private static func rows(of space: String, in store: FerryStore) -> [(SyncedTable, String, StatementArguments)] {
        store.tables.compactMap { table in
            switch table.space {
            case .personal: nil
            case .named(let named): named == space ? (table, "1", []) : nil
            case .column(let column): (table, "\(column.quotedDatabaseIdentifier) = ?", [space])
            }
        }
    }

    /// Whether the store holds rows of `space`.
    private static func holdsRows(of space: String, store: FerryStore, db: Database) throws -> Bool {
        for (table, condition, arguments) in rows(of: space, in: store)
        where try Bool.fetchOne(
            db,
            sql: "SELECT EXISTS (SELECT 1 FROM \(table.table.quotedDatabaseIdentifier) WHERE \(condition))",
            arguments: arguments
        ) == true {
            return true
        }
        return false
    }

    private static func revoke(_ space: String, store: FerryStore, db: Database) throws -> (space: String, removed: Int, deadLettered: Int) {
        var removed = 0
        try FerryStore.withoutCapture(db) {
            for (table, condition, arguments) in rows(of: space, in: store) {
                let entity = table.entityColumn.map(\.quotedDatabaseIdentifier) ?? table.entity.sqlLiteral
                let quoted = table.table.quotedDatabaseIdentifier
                try db.execute(
                    sql: """
                        DELETE FROM ferry_versions WHERE (entity, entity_id) IN
                            (SELECT \(entity), CAST(\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT) FROM \(quoted) WHERE \(condition))
                        """,
                    arguments: arguments
                )
                try db.execute(
                    sql: """
                        DELETE FROM ferry_extras WHERE (entity, entity_id) IN
                            (SELECT \(entity), CAST(\(table.primaryKey.quotedDatabaseIdentifier) AS TEXT) FROM \(quoted) WHERE \(condition))
                        """,
                    arguments: arguments
                )
                try db.execute(sql: "DELETE FROM \(quoted) WHERE \(condition)", arguments: arguments)
                removed += db.changesCount
            }
        }
        try db.execute(sql: "DELETE FROM ferry_set_aside WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_joins WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_seen WHERE space = ?", arguments: [space])
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
        return (space, removed, db.changesCount)
    }
}
