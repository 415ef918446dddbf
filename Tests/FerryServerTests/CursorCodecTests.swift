import FerryProtocol
import Foundation
import Testing

@testable import FerryServer

/// Pull cursors are opaque and unforgeable: only a cursor this database issued to this user
/// reads back, as the position, horizon and epoch it stands for; and a cursor's history must
/// be the database's (`ChangeHead`).
@Suite("Cursor codec")
struct CursorCodecTests {
    static let codec = CursorCodec(secret: Data((0..<32).map { UInt8($0) }))

    @Test("a cursor reads back as what it stands for, for every position a database can reach; first-version cursors still read")
    func roundTrip() throws {
        for position: Int64 in [0, 1, 255, 256, 1 << 31, 1 << 53, .max] {
            let cursor = PullCursor(position: position, horizon: position / 2, epoch: .max - position, head: position | 1)
            let text = Self.codec.encode(cursor, userID: "alice")
            #expect(text.hasPrefix("c2."))
            #expect(try Self.codec.decode(text, userID: "alice") == cursor)
            #expect(
                try Self.codec.decode(Self.codec.encodeVersion1(position: position, userID: "alice"), userID: "alice")
                    == PullCursor(position: position)
            )
        }
    }

    @Test("another user's cursor, another database's, a changed byte, a negative position or a malformed one is refused as invalid_cursor")
    func forgeries() {
        let cursor = Self.codec.encode(PullCursor(position: 42, horizon: 7, epoch: 9), userID: "alice")
        let otherDatabase = CursorCodec(secret: Data(repeating: 7, count: 32))
        var tampered = Array(cursor)
        tampered[5] = tampered[5] == "A" ? "B" : "A"
        let refused = [
            (Self.codec, cursor, "bob"),
            (otherDatabase, cursor, "alice"),
            (Self.codec, String(tampered), "alice"),
            (Self.codec, Self.codec.encode(PullCursor(position: -1), userID: "alice"), "alice"),
            (Self.codec, "c1." + cursor.dropFirst(3), "alice"),
            (Self.codec, "c3." + cursor.dropFirst(3), "alice"),
            (Self.codec, "c2.not base64!", "alice"),
            (Self.codec, String(cursor.dropLast(4)), "alice"),
            (Self.codec, "", "alice"),
        ]
        for (codec, text, user) in refused {
            #expect(throws: ProtocolViolation.self, "\(text) for \(user)") { try codec.decode(text, userID: user) }
        }
    }

    @Test("a cursor past the head, past its epoch's base, or before the purge horizon expires; every cursor a history issued is accepted")
    func headRules() throws {
        func expires(_ cursor: PullCursor, _ head: ChangeHead) -> Bool {
            do {
                _ = try head.start(from: cursor)
                return false
            } catch {
                return error.code == .cursorExpired
            }
        }
        // Epoch 7 wrote 101 to 150 after epoch 5 wrote up to 100; tombstones up to 20 were purged.
        let head = ChangeHead(position: 150, epoch: 7, epochBase: 100, purgedThrough: 20)
        #expect(!expires(PullCursor(position: 150, epoch: 7), head))
        #expect(!expires(PullCursor(position: 100, epoch: 5), head), "a cursor of an earlier epoch within its history")
        #expect(!expires(PullCursor(position: 20, epoch: 0), head), "a first-version cursor at the purge horizon")
        #expect(expires(PullCursor(position: 19, epoch: 7), head), "before the purge horizon")
        #expect(expires(PullCursor(position: 151, epoch: 7), head), "past the head: this history is older than the cursor")
        #expect(expires(PullCursor(position: 120, epoch: 5), head), "an epoch's cursor past what that epoch wrote here")
        #expect(expires(PullCursor(position: 120, epoch: 9), head), "an epoch this history never had, past its base")
        // A live backup: the device read position 120 of epoch 7 while the history reached 150; restored to
        // 130 of the same epoch, its position is there but the history it saw is not.
        let restored = ChangeHead(position: 130, epoch: 7, epochBase: 100)
        #expect(expires(PullCursor(position: 120, epoch: 7, head: 150), restored), "saw a longer history than the restored one")
        #expect(!expires(PullCursor(position: 120, epoch: 7, head: 130), restored))
        // From scratch: the head is the horizon; caught up, the cursor stands at the head and drops the horizon.
        let start = try head.start(from: nil)
        #expect(start == PullCursor(position: 0, horizon: 150, epoch: 7, head: 150))
        #expect(head.cursor(after: 60, from: start, caughtUp: false) == PullCursor(position: 60, horizon: 150, epoch: 7, head: 150))
        #expect(head.cursor(after: 60, from: start, caughtUp: true) == PullCursor(position: 150, horizon: 0, epoch: 7, head: 150))
        // A pull from scratch below the purge horizon goes on: its horizon skips every purged tombstone.
        #expect(!expires(PullCursor(position: 10, horizon: 150, epoch: 7), head))
    }
}
