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
            if before[membership.space] == nil { changes.joined.append(membership) }
        }
        // The guards name the read-only spaces in their messages.
        if Dictionary(spaces.map { ($0.space, $0.role) }, uniquingKeysWith: { $1 }) != before {
            try ChangeCapture.reinstallGuards(for: store.tables, in: db)
        }
        return changes
    }

    private static func revoke(_ space: String, store: FerryStore, db: Database) throws -> (space: String, removed: Int, deadLettered: Int) {
        var removed = 0
        try FerryStore.withoutCapture(db) {
            for table in store.tables {
                let condition: String
                switch table.space {
                case .personal: continue
                case .named(let named):
                    guard named == space else { continue }
                    condition = "1"
                case .column(let column):
                    condition = "\(column.quotedDatabaseIdentifier) = ?"
                }
                let arguments: StatementArguments = condition == "1" ? [] : [space]
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
