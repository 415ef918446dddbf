/// Writes JSON text: structure as given, strings escaped as RFC 8259 requires, and JSON that
/// is already encoded spliced in verbatim.
///
/// Both sides move record data that is stored as JSON text; writing the envelope around it
/// by hand spares decoding every record into `JSONValue` only to encode it again.
package struct JSONTextWriter: Sendable {
    package private(set) var bytes: [UInt8] = []

    package init(capacity: Int) {
        bytes.reserveCapacity(capacity)
    }

    /// Structure or a literal, exactly as written.
    package mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// JSON that is already encoded, such as a record's stored data.
    package mutating func fragment(_ json: some Sequence<UInt8>) {
        bytes.append(contentsOf: json)
    }

    package mutating func integer(_ value: Int64) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A value as records are stored: compact, keys sorted (by their UTF-8 bytes, as
    /// `JSONEncoder`'s `.sortedKeys` does), integers as integers. A number that is not finite
    /// has no JSON form: nothing is written and the result is false.
    @discardableResult
    package mutating func value(_ value: JSONValue) -> Bool {
        switch value {
        case .null: raw("null")
        case .bool(let bool): bool ? raw("true") : raw("false")
        case .integer(let integer): self.integer(integer)
        case .number(let number):
            guard number.isFinite else { return false }
            bytes.append(contentsOf: "\(number)".utf8)
        case .string(let string): self.string(string)
        case .array(let elements):
            raw("[")
            for (index, element) in elements.enumerated() {
                if index > 0 { raw(",") }
                guard self.value(element) else { return false }
            }
            raw("]")
        case .object(let fields):
            raw("{")
            for (index, key) in fields.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if index > 0 { raw(",") }
                string(key)
                raw(":")
                guard self.value(fields[key]!) else { return false }
            }
            raw("}")
        }
        return true
    }

    /// A quoted string: `"` and `\` escaped, control characters as escapes, the rest as UTF-8.
    package mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        let utf8 = value.utf8
        if !utf8.contains(where: Self.needsEscape) {
            bytes.append(contentsOf: utf8)
        } else {
            for byte in utf8 {
                switch byte {
                case UInt8(ascii: "\""): raw("\\\"")
                case UInt8(ascii: "\\"): raw("\\\\")
                case UInt8(ascii: "\n"): raw("\\n")
                case UInt8(ascii: "\r"): raw("\\r")
                case UInt8(ascii: "\t"): raw("\\t")
                case ..<0x20:
                    let hex = Array("0123456789abcdef".utf8)
                    raw("\\u00")
                    bytes.append(contentsOf: [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                default: bytes.append(byte)
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// `strings` as a JSON array's text, for SQLite's `json_each`.
    package static func array(of strings: some Collection<String>) -> String {
        var writer = JSONTextWriter(capacity: 2 + strings.count * 16)
        writer.raw("[")
        for (index, string) in strings.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(string)
        }
        writer.raw("]")
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// How many bytes `string(value)` writes, quotes included.
    package static func encodedLength(of value: String) -> Int {
        value.utf8.reduce(2) { length, byte in
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): length + 2
            case ..<0x20: length + 6
            default: length + 1
            }
        }
    }

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }
}
