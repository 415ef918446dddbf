import FerryProtocol
import NIOCore

/// The changes of one pull page, in change order: records the server writes as JSON, and runs of
/// changes a database already wrote as JSON (`EncodedChanges`), which the page sends as they are.
struct PageChanges: Sendable {
    enum Part: Sendable {
        case record(StoredRecord)
        case encoded(EncodedChanges)
    }

    private(set) var parts: [Part] = []
    /// How many changes the page holds.
    private(set) var count = 0
    /// Bytes of record data the page holds.
    private(set) var dataBytes = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ record: StoredRecord) {
        parts.append(.record(record))
        count += 1
        dataBytes += record.data?.count ?? 0
    }

    mutating func append(_ encoded: EncodedChanges) {
        guard encoded.count > 0 else { return }
        parts.append(.encoded(encoded))
        count += encoded.count
        dataBytes += encoded.dataBytes
    }

    mutating func append(contentsOf other: PageChanges) {
        parts += other.parts
        count += other.count
        dataBytes += other.dataBytes
    }

    /// About how many bytes the changes take as JSON.
    var estimatedBytes: Int {
        parts.reduce(0) { total, part in
            switch part {
            case .record(let record): total + 96 + record.entity.utf8.count + record.entityID.utf8.count + (record.data?.count ?? 0)
            case .encoded(let encoded): total + encoded.json.readableBytes
            }
        }
    }

    /// The changes as the members of PROTOCOL.md's `changes` array, comma-separated.
    func write(to body: inout JSONTextWriter) {
        var first = true
        for part in parts {
            if !first { body.raw(",") }
            first = false
            switch part {
            case .record(let record): Self.write(record, to: &body)
            case .encoded(let encoded): body.fragment(encoded.json.readableBytesView)
            }
        }
    }

    /// One change as PROTOCOL.md's pull writes it, its stored data spliced in verbatim.
    private static func write(_ record: StoredRecord, to body: inout JSONTextWriter) {
        body.raw("{\"entity\":")
        body.string(record.entity)
        body.raw(",\"entityID\":")
        body.string(record.entityID)
        if let space = record.space {
            body.raw(",\"space\":")
            body.string(space)
        }
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
}

/// Changes a database wrote as JSON (PostgreSQL's pull statement): `count` change objects,
/// comma-separated, exactly as `PageChanges` writes a record, holding `dataBytes` bytes of data.
struct EncodedChanges: Sendable {
    var json: ByteBuffer
    var count: Int
    var dataBytes: Int
}
