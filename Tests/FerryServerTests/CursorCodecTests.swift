import FerryProtocol
import Foundation
import Testing

@testable import FerryServer

/// Pull cursors are opaque and unforgeable: only a cursor this database issued to this user
/// reads back, as the position it stands for.
@Suite("Cursor codec")
struct CursorCodecTests {
    static let codec = CursorCodec(secret: Data((0..<32).map { UInt8($0) }))

    @Test("a cursor reads back as its position, for every position a database can reach")
    func roundTrip() throws {
        for position: Int64 in [0, 1, 255, 256, 1 << 31, 1 << 53, .max] {
            let cursor = Self.codec.encode(position: position, userID: "alice")
            #expect(cursor.hasPrefix("c1."))
            #expect(try Self.codec.decode(cursor, userID: "alice") == position)
        }
    }

    @Test("another user's cursor, another database's, a changed byte, a negative position or a malformed one is refused as invalid_cursor")
    func forgeries() {
        let cursor = Self.codec.encode(position: 42, userID: "alice")
        let otherDatabase = CursorCodec(secret: Data(repeating: 7, count: 32))
        var tampered = Array(cursor)
        tampered[5] = tampered[5] == "A" ? "B" : "A"
        let refused = [
            (Self.codec, cursor, "bob"),
            (otherDatabase, cursor, "alice"),
            (Self.codec, String(tampered), "alice"),
            (Self.codec, Self.codec.encode(position: -1, userID: "alice"), "alice"),
            (Self.codec, "c2." + cursor.dropFirst(3), "alice"),
            (Self.codec, "c1.not base64!", "alice"),
            (Self.codec, String(cursor.dropLast(4)), "alice"),
            (Self.codec, "", "alice"),
        ]
        for (codec, text, user) in refused {
            #expect(throws: ProtocolViolation.self, "\(text) for \(user)") { try codec.decode(text, userID: user) }
        }
    }
}
