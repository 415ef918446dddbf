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
        try PulledRecords.forgetSetAside(inSpace: space, db: db)
        try SpaceJoins.forget(space, db: db)
        // Records of the space whose rows the app already deleted have no row above, only their
        // changes: their versions go too, or a grant that brings the space whole again would
        // find them known at the version it sends and skip them.
        try KnownVersions.forget(recordsIn: OutboxTable.recordsInSpaceSQL, arguments: [space], db: db)
        let deadLettered = try OutboxTable.deadLetterQueued(
            in: space,
            reason: "space '\(space)' was revoked: this user is no longer a member, or the space was deleted; the change was not sent",
            db: db
        )
        return (space, removal.total, deadLettered)
    }
}
