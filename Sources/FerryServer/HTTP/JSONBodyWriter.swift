import Foundation
import NIOCore

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
