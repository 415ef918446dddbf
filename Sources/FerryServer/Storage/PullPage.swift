import FerryProtocol
import Foundation
import NIOCore

/// One page of a pull as storage returns it: the records with their data still encoded as
/// stored, so that the response carries it as is instead of decoding and re-encoding every
/// record (which cost more than reading the page from SQLite).
public struct PullPage: Sendable {
    var records: [StoredRecord]
    /// Opaque; the client passes it to the next pull.
    public var cursor: String
    /// Whether more changes follow this page; the client pulls again with ``PullPage/cursor`` while it is true.
    public var hasMore: Bool

    /// How many changes the page holds.
    public var count: Int { records.count }

    /// Bytes of record data the page holds.
    public var dataBytes: Int { records.reduce(0) { $0 + ($1.data?.count ?? 0) } }

    init(records: [StoredRecord], cursor: String, hasMore: Bool) {
        self.records = records
        self.cursor = cursor
        self.hasMore = hasMore
    }

    /// Most rows a pull reads for a page of `limit`: a client's own writes are read and left
    /// out, so a page reads at most this many, whatever is left out.
    static func scanLimit(_ limit: Int, leavingOut ownWrites: OwnWrites?) -> Int {
        ownWrites == nil ? limit + 1 : 4 * limit + 1
    }

    /// Builds a page from the rows after a position, offered one by one in change order (at most
    /// `scanLimit` of them): up to `limit` records and ``ProtocolLimits/maxPullPageDataBytes`` of
    /// their data (the first record goes whatever its size), leaving out `ownWrites`. The cursor
    /// stands after the last row the page took or left out, so the next pull reads neither again.
    struct Builder: Sendable {
        let limit: Int
        let ownWrites: OwnWrites?
        private(set) var records: [StoredRecord] = []
        private var position: Int64
        private var dataBytes = 0
        private var read = 0
        private var full = false

        init(after: Int64, limit: Int, leavingOut ownWrites: OwnWrites?) {
            self.position = after
            self.limit = limit
            self.ownWrites = ownWrites
        }

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
            guard records.count < limit, records.isEmpty || dataBytes + size <= ProtocolLimits.maxPullPageDataBytes else {
                full = true
                return false
            }
            var record = record
            record.data = try data()
            records.append(record)
            dataBytes += size
            position = seq
            return true
        }

        /// The page: more may follow if it filled, or if the read stopped at `scanLimit` rows.
        /// `encode` makes the cursor of the position read up to, knowing whether the pull is caught up.
        func page(encode: (_ position: Int64, _ caughtUp: Bool) -> String) -> PullPage {
            let hasMore = full || read >= PullPage.scanLimit(limit, leavingOut: ownWrites)
            return PullPage(records: records, cursor: encode(position, !hasMore), hasMore: hasMore)
        }
    }

    /// The `PullResponse` body of PROTOCOL.md, each record's stored data spliced in verbatim.
    public func responseBody() -> ByteBuffer {
        var body = JSONTextWriter(
            capacity: 64 + records.reduce(0) { $0 + 96 + $1.entity.utf8.count + $1.entityID.utf8.count + ($1.data?.count ?? 0) }
        )
        body.raw("{\"changes\":[")
        for (index, record) in records.enumerated() {
            if index > 0 { body.raw(",") }
            body.raw("{\"entity\":")
            body.string(record.entity)
            body.raw(",\"entityID\":")
            body.string(record.entityID)
            body.raw(record.deleted ? ",\"op\":\"delete\",\"version\":" : ",\"op\":\"upsert\",\"version\":")
            body.integer(record.version)
            if let naturalKey = record.naturalKey {
                body.raw(",\"naturalKey\":")
                body.string(naturalKey)
            }
            if !record.deleted, let data = record.data {
                body.raw(",\"data\":")
                body.fragment(data)
            }
            body.raw("}")
        }
        body.raw("],\"cursor\":")
        body.string(cursor)
        body.raw(hasMore ? ",\"hasMore\":true}" : ",\"hasMore\":false}")
        return ByteBuffer(bytes: body.bytes)
    }
}
