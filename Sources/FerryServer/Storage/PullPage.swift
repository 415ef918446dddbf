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

    /// The page of `rows` (all rows after `after` in change order, up to `scanLimit`): up to
    /// `limit` records, leaving out `ownWrites`. The cursor stands after the last row read for
    /// the page, left out or not, so the next pull does not read left-out rows again.
    init(
        scanned rows: [(record: StoredRecord, seq: Int64)],
        after: Int64,
        limit: Int,
        leavingOut ownWrites: OwnWrites?,
        encode: (Int64) -> String
    ) {
        var page: [StoredRecord] = []
        var position = after
        for (record, seq) in rows {
            if ownWrites?.leavesOut(record, at: seq) == true {
                position = seq
                continue
            }
            if page.count == limit {
                self.init(records: page, cursor: encode(position), hasMore: true)
                return
            }
            page.append(record)
            position = seq
        }
        // Every row read: more may follow only if the read stopped at its limit.
        self.init(records: page, cursor: encode(position), hasMore: rows.count >= Self.scanLimit(limit, leavingOut: ownWrites))
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
