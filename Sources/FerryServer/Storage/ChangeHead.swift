import FerryProtocol

/// The head of a user's change history as a pull reads it, in the same snapshot as its rows:
/// the last position handed out, the epoch of the server process that wrote last, the position
/// before that epoch's first write, and the position through which tombstones were purged.
///
/// A server process takes a random epoch when it starts, and a write of another epoch than the
/// head's moves `epochBase` to the head first. So every position a cursor of another epoch can
/// honestly hold is at most `epochBase`, and one of the current epoch at most `position`. A
/// cursor past that was read from a history this database no longer has: it was restored from
/// a backup taken before the cursor was issued, and the positions after the backup are being
/// handed out again to other changes.
struct ChangeHead: Sendable, Equatable {
    var position: Int64 = 0
    var epoch: Int64 = 0
    var epochBase: Int64 = 0
    var purgedThrough: Int64 = 0
    /// The `lastMutationID` of the client whose writes the pull names (`answered`); 0 for a
    /// client this database does not know.
    var lastMutationID: Int64 = 0

    /// The cursor a pull starts from: `cursor`, or the start of the history. A pull from scratch
    /// that names no writes of its own (`answered`) comes from a device that holds no record, and
    /// has this head as its horizon: it needs no tombstone. One that names some holds those
    /// records, and gets the tombstones that may delete them.
    ///
    /// Throws `cursor_expired` when the device knows more than this database can serve it: a
    /// cursor older than what was purged (unless it skips every purged tombstone anyway, as a
    /// pull from scratch does); a cursor that saw a longer history than this database has (it
    /// was restored from a backup); writes named as answered that this database never applied
    /// (the same, or the client was forgotten); or a first pull naming writes of its own, which
    /// needs every tombstone, after some were purged.
    func start(from cursor: PullCursor?, naming ownWrites: OwnWrites? = nil) throws(ProtocolViolation) -> PullCursor {
        if let highest = ownWrites?.answered.last?.upperBound, highest > lastMutationID {
            throw Self.expired(
                "this server never applied writes answered to this client (mutation \(highest); it knows up to \(lastMutationID)): "
                    + "its database was restored from a backup, or it forgot the client"
            )
        }
        guard let cursor else {
            if ownWrites != nil && purgedThrough > 0 {
                throw Self.expired("deletions were purged after the retention, so a first pull naming writes of its own cannot bring them all")
            }
            return PullCursor(position: 0, horizon: ownWrites == nil ? position : 0, epoch: epoch, head: position)
        }
        if cursor.position < purgedThrough && cursor.horizon < purgedThrough {
            throw Self.expired("the cursor is older than what this server keeps (deletions before it were purged after the retention)")
        }
        // What the device saw of the history must be history this database has: all of it in
        // the current epoch, or, from an earlier one, what that epoch wrote before this one began.
        let seen = max(cursor.position, cursor.head)
        if cursor.epoch == epoch ? seen > position : seen > epochBase {
            throw Self.expired("the cursor was read from a history this server does not have (its database was restored from a backup)")
        }
        return cursor
    }

    private static func expired(_ why: String) -> ProtocolViolation {
        ProtocolViolation(
            .cursorExpired,
            why + "; pull from the beginning, without a cursor and naming no writes, and drop local records that pull does not bring back"
        )
    }

    /// The cursor after a page that read up to `position`: once caught up, at the head, since
    /// every change up to it was read or is a tombstone the pull leaves out.
    func cursor(after position: Int64, from start: PullCursor, caughtUp: Bool) -> PullCursor {
        let position = caughtUp ? max(position, self.position) : position
        return PullCursor(position: position, horizon: start.horizon > position ? start.horizon : 0, epoch: epoch, head: self.position)
    }
}
