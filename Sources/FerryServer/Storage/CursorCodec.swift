import Crypto
import FerryProtocol
import Foundation

/// Makes pull cursors opaque and unforgeable: a position in the storage's change
/// order plus an HMAC over the position and the user, keyed by a secret kept in
/// the database. Cursors therefore survive restarts, are shared by every server
/// process on the same database, and a cursor this server did not issue (or
/// issued to another user) is recognised and refused.
struct CursorCodec: Sendable {
    private static let tagBytes = 16
    private let key: SymmetricKey

    init(secret: Data) {
        self.key = SymmetricKey(data: secret)
    }

    func encode(position: Int64, userID: String) -> String {
        var bytes = Self.bytes(of: position)
        bytes.append(contentsOf: tag(position: position, userID: userID))
        return "c1." + Data(bytes).base64URLEncodedString()
    }

    /// The position a cursor stands for.
    func decode(_ cursor: String, userID: String) throws(ProtocolViolation) -> Int64 {
        let invalid = ProtocolViolation(
            .invalidCursor,
            "cursor was not issued by this server for this user; pull without a cursor to start from the beginning"
        )
        guard cursor.hasPrefix("c1."), let data = Data(base64URLEncoded: String(cursor.dropFirst(3))),
            data.count == 8 + Self.tagBytes
        else { throw invalid }
        let bytes = [UInt8](data)
        let position = bytes[0..<8].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        let expected = tag(position: position, userID: userID)
        // Constant-time comparison of the tags.
        guard position >= 0, zip(bytes[8...], expected).reduce(UInt8(0), { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw invalid
        }
        return position
    }

    private func tag(position: Int64, userID: String) -> [UInt8] {
        var message = Data("ferry-cursor-v1".utf8)
        message.append(contentsOf: Self.bytes(of: position))
        message.append(contentsOf: Array(userID.utf8))
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(Self.tagBytes))
    }

    private static func bytes(of position: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: position >> (8 * (7 - $0))) }
    }
}
