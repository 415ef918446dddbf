import FerryProtocol
import Foundation
import GRDB

/// What leaving a space does to the store: its rows, versions, set-aside copies and join notes
/// go, uncaptured; its changes still queued become dead letters with the reason.
enum SpaceRevocation {
    /// Revokes `space` in `db`'s transaction; returns what it removed and dead-lettered.
    static func revoke(_ space: String, store: FerryStore, db: Database) throws -> (space: String, removed: Int, deadLettered: Int) {
        var writer = RecordWriter(store: store)
        let removal = try FerryStore.withoutCapture(db) { try writer.remove(SpaceJoins.selections(of: space, in: store), db: db) }
        try db.execute(sql: "DELETE FROM ferry_set_aside WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_joins WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_seen WHERE space = ?", arguments: [space])
        try db.execute(sql: "DELETE FROM ferry_join_candidates WHERE space = ?", arguments: [space])
        // Records of the space whose rows the app already deleted have no row above, only their
        // changes: their versions go too, or a grant that brings the space whole again would
        // find them known at the version it sends and skip them.
        try db.execute(
            sql: "DELETE FROM ferry_versions WHERE (entity, entity_id) IN (\(OutboxTable.recordsInSpaceSQL))",
            arguments: [space]
        )
        let deadLettered = try OutboxTable.deadLetterQueued(
            in: space,
            reason: "space '\(space)' was revoked: this user is no longer a member, or the space was deleted; the change was not sent",
            db: db
        )
        return (space, removal.total, deadLettered)
    }
}
