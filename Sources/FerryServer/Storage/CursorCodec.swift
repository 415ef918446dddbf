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

    /// A cursor over the personal space and spaces (`PullPosition`): a `c2.` cursor while it
    /// names no space, else `c3.`: the `c2.` fields, then the epochs the spaces' entries use and
    /// for each space its key, position, horizon, epoch (as an index in that list) and head
    /// (past its position), as variable-length integers, which keeps a cursor over 1,000 spaces
    /// near 8 KB. The memberships' version follows the `c2.` fields.
    func encode(_ position: PullPosition, userID: String) -> String {
        guard !position.spaces.isEmpty || position.memberships != 0 else {
            return encode(position.personal, userID: userID)
        }
        let personal = position.personal
        var bytes =
            Self.bytes(of: personal.position) + Self.bytes(of: personal.horizon) + Self.bytes(of: personal.epoch)
            + Self.bytes(of: personal.head) + Self.bytes(of: position.memberships)
        let entries = position.spaces.sorted { $0.key < $1.key }
        var epochs: [Int64] = []
        var epochIndex: [Int64: Int] = [:]
        for (_, cursor) in entries where epochIndex[cursor.epoch] == nil {
            epochIndex[cursor.epoch] = epochs.count
            epochs.append(cursor.epoch)
        }
        Self.appendVarint(UInt64(epochs.count), to: &bytes)
        for epoch in epochs { bytes += Self.bytes(of: epoch) }
        Self.appendVarint(position.continuing.map { UInt64($0) + 1 } ?? 0, to: &bytes)
        Self.appendVarint(UInt64(entries.count), to: &bytes)
        for (key, cursor) in entries {
            for value in [key, cursor.position, cursor.horizon, Int64(epochIndex[cursor.epoch]!), max(0, cursor.head - cursor.position)] {
                Self.appendVarint(UInt64(value), to: &bytes)
            }
        }
        bytes.append(contentsOf: tag(bytes, version: 3, userID: userID))
        return "c3." + Data(bytes).base64URLEncodedString()
    }

    /// What a cursor stands for, with the spaces it names (none for `c1.` and `c2.`).
    func decodePosition(_ cursor: String, userID: String) throws(ProtocolViolation) -> PullPosition {
        guard cursor.hasPrefix("c3.") else { return PullPosition(personal: try decode(cursor, userID: userID)) }
        let invalid = ProtocolViolation(
            .invalidCursor,
            "cursor was not issued by this server for this user; pull without a cursor to start from the beginning"
        )
        guard let data = Data(base64URLEncoded: String(cursor.dropFirst(3))), data.count > 40 + Self.tagBytes else { throw invalid }
        let bytes = [UInt8](data)
        let signed = Array(bytes[..<(bytes.count - Self.tagBytes)])
        let expected = tag(signed, version: 3, userID: userID)
        guard zip(bytes[signed.count...], expected).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else { throw invalid }
        // Signed by this server: the fields are as it wrote them.
        var reader = Self.Reader(bytes: signed)
        let personal = PullCursor(position: reader.int64(), horizon: reader.int64(), epoch: reader.int64(), head: reader.int64())
        let memberships = reader.int64()
        let epochs = (0..<reader.varint()).map { _ in reader.int64() }
        let continuing = reader.varint()
        var spaces: [Int64: PullCursor] = [:]
        for _ in 0..<reader.varint() {
            let key = reader.varint()
            let position = reader.varint()
            let horizon = reader.varint()
            let epoch = Int(reader.varint())
            let head = position + reader.varint()
            guard epochs.indices.contains(epoch) else { throw invalid }
            spaces[key] = PullCursor(position: position, horizon: horizon, epoch: epochs[epoch], head: head)
        }
        guard reader.atEnd, personal.position >= 0 else { throw invalid }
        var position = PullPosition(personal: personal, spaces: spaces, memberships: memberships)
        position.continuing = continuing > 0 ? continuing - 1 : nil
        return position
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

    private static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    /// Reads a signed `c3.` body; past its end it reads zeros, and `atEnd` tells.
    private struct Reader {
        let bytes: [UInt8]
        var offset = 0
        private(set) var overrun = false

        init(bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { offset == bytes.count && !overrun }

        mutating func int64() -> Int64 {
            guard offset + 8 <= bytes.count else {
                overrun = true
                return 0
            }
            defer { offset += 8 }
            return bytes[offset..<(offset + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        }

        mutating func varint() -> Int64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while offset < bytes.count, shift < 64 {
                let byte = bytes[offset]
                offset += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return Int64(bitPattern: value) }
                shift += 7
            }
            overrun = true
            return 0
        }
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
