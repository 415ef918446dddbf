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
    public var hasMore: Bool

    /// How many changes the page holds.
    public var count: Int { records.count }

    /// The `PullResponse` body of PROTOCOL.md, each record's stored data spliced in verbatim.
    public func responseBody() -> ByteBuffer {
        var body = JSONBodyWriter(capacity: 64 + records.reduce(0) { $0 + 96 + $1.entity.utf8.count + $1.entityID.utf8.count + ($1.data?.count ?? 0) })
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
                body.bytes(data)
            }
            body.raw("}")
        }
        body.raw("],\"cursor\":")
        body.string(cursor)
        body.raw(hasMore ? ",\"hasMore\":true}" : ",\"hasMore\":false}")
        return body.buffer
    }
}

/// Writes JSON text into a buffer: structure as given, strings escaped as RFC 8259 requires.
struct JSONBodyWriter {
    private(set) var buffer: ByteBuffer

    init(capacity: Int) {
        buffer = ByteBufferAllocator().buffer(capacity: capacity)
    }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { _ = buffer.writeBytes($0) }
    }

    mutating func bytes(_ data: Data) {
        buffer.writeBytes(data)
    }

    mutating func integer(_ value: Int64) {
        buffer.writeString(String(value))
    }

    /// A quoted string: `"` and `\` escaped, control characters as `\uXXXX`, the rest as UTF-8.
    mutating func string(_ value: String) {
        buffer.writeInteger(UInt8(ascii: "\""))
        let utf8 = value.utf8
        if !utf8.contains(where: Self.needsEscape) {
            buffer.writeString(value)
        } else {
            for byte in utf8 {
                switch byte {
                case UInt8(ascii: "\""): raw("\\\"")
                case UInt8(ascii: "\\"): raw("\\\\")
                case UInt8(ascii: "\n"): raw("\\n")
                case UInt8(ascii: "\r"): raw("\\r")
                case UInt8(ascii: "\t"): raw("\\t")
                case ..<0x20:
                    raw("\\u00")
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    buffer.writeBytes([hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                default: buffer.writeInteger(byte)
                }
            }
        }
        buffer.writeInteger(UInt8(ascii: "\""))
    }

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }
}
