import FerryProtocol
import Foundation
import NIOCore

/// One page of a pull as storage returns it: the records with their data still encoded as
/// stored, so that the response carries it as is instead of decoding and re-encoding every
/// record (which cost more than reading the page from SQLite), or the changes as the database
/// wrote them (`EncodedChanges`).
public struct PullPage: Sendable {
    var changes: PageChanges
    /// Opaque; the client passes it to the next pull.
    public var cursor: String
    /// Whether more changes follow this page; the client pulls again with ``PullPage/cursor`` while it is true.
    public var hasMore: Bool
    /// The user's memberships as the page was read, sorted by space id; `nil` when unchanged since the request's cursor.
    public var spaces: [Membership]?
    /// The spaces the request's cursor covered that the user can no longer read.
    public var revoked: [String] = []

    /// How many changes the page holds.
    public var count: Int { changes.count }

    /// Bytes of record data the page holds.
    public var dataBytes: Int { changes.dataBytes }

    /// About how many bytes the page's body takes (10,000 tombstones of long ids weigh more than their data).
    var estimatedBytes: Int { 64 + 96 * (spaces?.count ?? 0) + changes.estimatedBytes }

    init(changes: PageChanges, cursor: String, hasMore: Bool, spaces: [Membership]? = nil, revoked: [String] = []) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
        self.spaces = spaces
        self.revoked = revoked
    }

    /// Most rows a pull reads for a page of `limit`: a client's own writes are read and left
    /// out, so a page reads at most this many, whatever is left out.
    static func scanLimit(_ limit: Int, leavingOut ownWrites: OwnWrites?) -> Int {
        ownWrites == nil ? limit + 1 : 4 * limit + 1
    }

    /// Builds a page from the rows after a position, offered one by one in change order (at most
    /// `scanLimit` of them): up to `limit` records and `budget` bytes of their data (with
    /// `takesFirst`, the first record goes whatever its size), leaving out `ownWrites`. The cursor
    /// stands after the last row the page took or left out, so the next pull reads neither again.
    /// A page over several spaces (`SpacedPage`) has a builder for each history it reads.
    struct Builder: Sendable {
        let limit: Int
        let ownWrites: OwnWrites?
        let budget: Int
        let takesFirst: Bool
        /// The space the rows are of, set on each record taken.
        let space: String?
        private(set) var changes = PageChanges()
        private(set) var position: Int64
        private var read = 0
        private var full = false

        init(
            after: Int64,
            limit: Int,
            leavingOut ownWrites: OwnWrites?,
            budget: Int = ProtocolLimits.maxPullPageDataBytes,
            takesFirst: Bool = true,
            space: String? = nil
        ) {
            self.position = after
            self.limit = limit
            self.ownWrites = ownWrites
            self.budget = budget
            self.takesFirst = takesFirst
            self.space = space
        }

        /// Whether the read stopped before the end of the history: the page filled, or
        /// `scanLimit` rows were read.
        var stopped: Bool { full || read >= scanLimit }

        /// Most rows the read may offer (`PullPage.scanLimit`).
        var scanLimit: Int { PullPage.scanLimit(limit, leavingOut: ownWrites) }

        /// Offers the next row, its data `size` in bytes (0 for a tombstone); `data` is read only
        /// if the page takes it, so a row past the budget is never copied. `fits: false` says
        /// the database already found it past the budget. Returns whether to offer more.
        mutating func offer(_ record: StoredRecord, seq: Int64, size: Int, fits: Bool = true, data: () throws -> Data?) rethrows -> Bool {
            read += 1
            // A row past the database's budget ends the page even if it would be left out: the
            // rows after it were not read, so the cursor must not pass it.
            guard fits else {
                full = true
                return false
            }
            if ownWrites?.leavesOut(record, at: seq) == true {
                position = seq
                return true
            }
            guard changes.count < limit, (takesFirst && changes.isEmpty) || changes.dataBytes + size <= budget else {
                full = true
                return false
            }
            var record = record
            record.data = try data()
            record.space = space
            changes.append(record)
            position = seq
            return true
        }

        /// Takes a read the database decided as `offer` would have, row by row (PostgreSQL's
        /// `pullQuery`): the changes it took, the position it read up to, and whether it stopped
        /// before the end of the history. Only for a builder nothing was offered to.
        mutating func take(_ encoded: EncodedChanges, through position: Int64?, stopped: Bool) {
            precondition(read == 0 && changes.isEmpty, "a builder takes a database's read before any row is offered")
            changes.append(encoded)
            if let position { self.position = position }
            full = stopped
        }

        /// The page: more may follow if it filled, or if the read stopped at `scanLimit` rows.
        /// `encode` makes the cursor of the position read up to, knowing whether the pull is caught up.
        func page(encode: (_ position: Int64, _ caughtUp: Bool) -> String) -> PullPage {
            PullPage(changes: changes, cursor: encode(position, !stopped), hasMore: stopped)
        }
    }

    /// The `PullResponse` body of PROTOCOL.md, each record's stored data spliced in verbatim.
    public func responseBody() -> ByteBuffer {
        var body = JSONTextWriter(capacity: estimatedBytes)
        body.raw("{\"changes\":[")
        changes.write(to: &body)
        body.raw("],\"cursor\":")
        body.string(cursor)
        body.raw(hasMore ? ",\"hasMore\":true" : ",\"hasMore\":false")
        if let spaces {
            body.raw(",\"spaces\":[")
            for (index, membership) in spaces.enumerated() {
                body.raw(index == 0 ? "{\"space\":" : ",{\"space\":")
                body.string(membership.space)
                body.raw(",\"role\":")
                body.string(membership.role.rawValue)
                if let incarnation = membership.incarnation {
                    body.raw(",\"incarnation\":")
                    body.string(incarnation)
                }
                body.raw("}")
            }
            body.raw("]")
        }
        if !revoked.isEmpty {
            body.raw(",\"revoked\":[")
            for (index, space) in revoked.enumerated() {
                if index > 0 { body.raw(",") }
                body.string(space)
            }
            body.raw("]")
        }
        body.raw("}")
        return ByteBuffer(bytes: body.bytes)
    }
}
