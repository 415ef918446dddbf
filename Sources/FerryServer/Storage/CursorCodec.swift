import Crypto
import FerryProtocol
import Foundation

/// Makes pull cursors opaque and unforgeable: a `PullCursor` plus an HMAC over it and the
/// user, keyed by a secret kept in the database. Cursors therefore survive restarts, are shared
/// by every server process on the same database, and a cursor this server did not issue (or
/// issued to another user) is recognised and refused.
///
/// `c2.` cursors carry the position, the horizon of a pull from scratch and the epoch of the
/// history they were read from; `c1.` cursors (a position only), issued by earlier servers,
/// still read back, as a position in the history before any epoch.
struct CursorCodec: Sendable {
    private static let tagBytes = 16
    private let key: SymmetricKey

    init(secret: Data) {
        self.key = SymmetricKey(data: secret)
    }

    func encode(_ cursor: PullCursor, userID: String) -> String {
        var bytes = Self.bytes(of: cursor.position) + Self.bytes(of: cursor.horizon) + Self.bytes(of: cursor.epoch)
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
        let fields = version == 1 ? 1 : 3
        guard let data = Data(base64URLEncoded: String(cursor.dropFirst(3))), data.count == 8 * fields + Self.tagBytes else { throw invalid }
        let bytes = [UInt8](data)
        let signed = Array(bytes[0..<(8 * fields)])
        let values = (0..<fields).map { field in bytes[(8 * field)..<(8 * field + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) } }
        let expected = tag(signed, version: version, userID: userID)
        // Constant-time comparison of the tags.
        guard values[0] >= 0, zip(bytes[(8 * fields)...], expected).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw invalid
        }
        return version == 1 ? PullCursor(position: values[0]) : PullCursor(position: values[0], horizon: values[1], epoch: values[2])
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

    /// The cursor a pull starts from: `cursor`, or the start of the history. A pull from scratch
    /// that names no writes of its own (`answered`) comes from a device that holds no record, and
    /// has this head as its horizon: it needs no tombstone. One that names some holds those
    /// records, and gets the tombstones that may delete them. Throws `cursor_expired` for a
    /// cursor older than what was purged, or read from a history this database does not have.
    func start(from cursor: PullCursor?, namingOwnWrites: Bool = false) throws(ProtocolViolation) -> PullCursor {
        guard let cursor else { return PullCursor(position: 0, horizon: namingOwnWrites ? 0 : position, epoch: epoch) }
        if cursor.position < purgedThrough {
            throw ProtocolViolation(
                .cursorExpired,
                "the cursor is older than what this server keeps (deletions before it were purged after the retention); "
                    + "pull from the beginning, without a cursor, and drop local records that pull does not bring back"
            )
        }
        if cursor.position > position || (cursor.epoch != epoch && cursor.position > epochBase) {
            throw ProtocolViolation(
                .cursorExpired,
                "the cursor was read from a history this server does not have (its database was restored from a backup); "
                    + "pull from the beginning, without a cursor, and drop local records that pull does not bring back"
            )
        }
        return cursor
    }

    /// The cursor after a page that read up to `position`: once caught up, at the head, since
    /// every change up to it was read or is a tombstone the pull leaves out.
    func cursor(after position: Int64, from start: PullCursor, caughtUp: Bool) -> PullCursor {
        let position = caughtUp ? max(position, self.position) : position
        return PullCursor(position: position, horizon: start.horizon > position ? start.horizon : 0, epoch: epoch)
    }
}
