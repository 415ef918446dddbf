import Crypto
import FerryProtocol
import Foundation

/// Makes pull cursors opaque and unforgeable: a `PullCursor` plus an HMAC over it and the
/// user, keyed by a secret kept in the database. Cursors therefore survive restarts, are shared
/// by every server process on the same database, and a cursor this server did not issue (or
/// issued to another user) is recognised and refused.
///
/// `c2.` cursors carry the position, the horizon of a pull from scratch, the epoch of the
/// history they were read from and its head then; `c1.` cursors (a position only), issued by
/// earlier servers, still read back, as a position in the history before any epoch.
struct CursorCodec: Sendable {
    private static let tagBytes = 16
    private let key: SymmetricKey

    init(secret: Data) {
        self.key = SymmetricKey(data: secret)
    }

    func encode(_ cursor: PullCursor, userID: String) -> String {
        var bytes = Self.bytes(of: cursor.position) + Self.bytes(of: cursor.horizon) + Self.bytes(of: cursor.epoch) + Self.bytes(of: cursor.head)
        bytes.append(contentsOf: tag(bytes, version: 2, userID: userID))
        return "c2." + Data(bytes).base64URLEncodedString()
    }

    /// A cursor of the first version: a position only (tests make them as earlier servers did).
    func encodeVersion1(position: Int64, userID: String) -> String {
        var bytes = Self.bytes(of: position)
        bytes.append(contentsOf: tag(bytes, version: 1, userID: userID))
        return "c1." + Data(bytes).base64URLEncodedString()
    }

    /// What a cursor stands for.
    func decode(_ cursor: String, userID: String) throws(ProtocolViolation) -> PullCursor {
        let invalid = ProtocolViolation(
            .invalidCursor,
            "cursor was not issued by this server for this user; pull without a cursor to start from the beginning"
        )
        let version: Int
        switch cursor.prefix(3) {
        case "c1.": version = 1
        case "c2.": version = 2
        default: throw invalid
        }
        let fields = version == 1 ? 1 : 4
        guard let data = Data(base64URLEncoded: String(cursor.dropFirst(3))), data.count == 8 * fields + Self.tagBytes else { throw invalid }
        let bytes = [UInt8](data)
        let signed = Array(bytes[0..<(8 * fields)])
        let values = (0..<fields).map { field in bytes[(8 * field)..<(8 * field + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) } }
        let expected = tag(signed, version: version, userID: userID)
        // Constant-time comparison of the tags.
        guard values[0] >= 0, zip(bytes[(8 * fields)...], expected).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw invalid
        }
        return version == 1
            ? PullCursor(position: values[0]) : PullCursor(position: values[0], horizon: values[1], epoch: values[2], head: values[3])
    }

    private func tag(_ signed: [UInt8], version: Int, userID: String) -> [UInt8] {
        var message = Data("ferry-cursor-v\(version)".utf8)
        message.append(contentsOf: signed)
        message.append(contentsOf: Array(userID.utf8))
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(Self.tagBytes))
    }

    private static func bytes(of value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * (7 - $0))) }
    }
}

/// Where a pull stands in a user's change history, as its cursor says.
struct PullCursor: Sendable, Equatable {
    /// Every change at or before this position has been read (or left out).
    var position: Int64
    /// Tombstones at or before this position are not sent: it was the head of the history when
    /// the pull began from scratch, and a device that starts from scratch has none of the records
    /// they delete (one that had is told to drop what the full pull does not bring back). 0 on
    /// an incremental pull.
    var horizon: Int64 = 0
    /// The epoch of the history the cursor was read from (`ChangeHead`); 0 for a history
    /// written before epochs, or a first-version cursor.
    var epoch: Int64 = 0
    /// The head of that history when the cursor was read: the device has seen that the history
    /// reached it (a first-version cursor: its position).
    var head: Int64

    init(position: Int64, horizon: Int64 = 0, epoch: Int64 = 0, head: Int64? = nil) {
        self.position = position
        self.horizon = horizon
        self.epoch = epoch
        self.head = head ?? position
    }
}

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
