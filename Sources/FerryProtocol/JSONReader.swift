/// A strict JSON (RFC 8259) parser from UTF-8 bytes to `JSONValue`.
///
/// The server reads every push body with it. Foundation's `JSONDecoder` reaches each
/// field through the generic `Codable` machinery, and `JSONValue` can only be decoded
/// there by trying one type after another; on a push of 500 records that was as costly
/// as storing them. Integers that fit in 64 bits stay integers; other numbers are doubles.
package struct JSONReader {
    /// Deeper nesting is refused, so that a hostile body cannot exhaust the stack.
    package static let maximumDepth = 512

    /// Why the text is not JSON, with the byte offset where reading stopped.
    package struct Failure: Error, CustomStringConvertible, Sendable {
        package var message: String
        package var offset: Int
        package var description: String { "\(message) at byte \(offset)" }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// Parses one JSON value that makes up the whole of `text` (surrounding whitespace allowed).
    package static func parse(_ text: some Collection<UInt8>) throws(Failure) -> JSONValue {
        let result: Result<JSONValue, Failure>? = text.withContiguousStorageIfAvailable { Self.parse(buffer: $0) }
        return try (result ?? Array(text).withUnsafeBufferPointer { Self.parse(buffer: $0) }).get()
    }

    private static func parse(buffer: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, Failure> {
        var reader = JSONReader(buffer)
        return Result { () throws(Failure) -> JSONValue in
            let value = try reader.value()
            reader.skipWhitespace()
            guard reader.index == buffer.count else { throw reader.failure("unexpected text after the JSON value") }
            return value
        }
    }

    private mutating func value() throws(Failure) -> JSONValue {
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return .object(try object())
        case UInt8(ascii: "["): return .array(try array())
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("unexpected character \(Self.describe(bytes[index]))")
        }
    }

    private mutating func object() throws(Failure) -> [String: JSONValue] {
        try enter()
        index += 1
        var fields: [String: JSONValue] = [:]
        skipWhitespace()
        if consume(UInt8(ascii: "}")) {
            depth -= 1
            return fields
        }
        repeat {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a quoted key") }
            let key = try string()
            skipWhitespace()
            guard consume(UInt8(ascii: ":")) else { throw failure("expected ':' after a key") }
            fields[key] = try value()
            skipWhitespace()
        } while consume(UInt8(ascii: ","))
        guard consume(UInt8(ascii: "}")) else { throw failure("expected ',' or '}' in an object") }
        depth -= 1
        return fields
    }

    private mutating func array() throws(Failure) -> [JSONValue] {
        try enter()
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if consume(UInt8(ascii: "]")) {
            depth -= 1
            return elements
        }
        repeat {
            elements.append(try value())
            skipWhitespace()
        } while consume(UInt8(ascii: ","))
        guard consume(UInt8(ascii: "]")) else { throw failure("expected ',' or ']' in an array") }
        depth -= 1
        return elements
    }

    private mutating func string() throws(Failure) -> String {
        index += 1
        let start = index
        // Fast path: no escapes, so the bytes between the quotes are the string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = try Self.utf8(UnsafeBufferPointer(rebasing: bytes[start..<index]), at: start)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw failure("unescaped control character in a string") }
            index += 1
        }
        var scalars = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return try Self.utf8(scalars, at: start)
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw failure("unexpected end of input in a string") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"): scalars.append(contentsOf: try unicodeEscape())
                default: throw failure("invalid escape \\\(Self.describe(escape)) in a string")
                }
            case ..<0x20:
                throw failure("unescaped control character in a string")
            default:
                scalars.append(byte)
                index += 1
            }
        }
        throw failure("unterminated string")
    }

    /// The UTF-8 of a `\uXXXX` escape (the `\u` already read), joining a surrogate pair.
    private mutating func unicodeEscape() throws(Failure) -> [UInt8] {
        var code = try hexQuad()
        if (0xD800..<0xDC00).contains(code) {
            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                throw failure("a high surrogate escape must be followed by a low one")
            }
            index += 2
            let low = try hexQuad()
            guard (0xDC00..<0xE000).contains(low) else { throw failure("a high surrogate escape must be followed by a low one") }
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        } else if (0xDC00..<0xE000).contains(code) {
            throw failure("a low surrogate escape without a high one")
        }
        guard let scalar = Unicode.Scalar(code) else { throw failure("invalid \\u escape") }
        return Array(String(Character(scalar)).utf8)
    }

    private mutating func hexQuad() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("unexpected end of input in a \\u escape") }
        var code: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("invalid hex digit \(Self.describe(byte)) in a \\u escape")
            }
            code = code << 4 | UInt32(digit)
            index += 1
        }
        return code
    }

    private mutating func number() throws(Failure) -> JSONValue {
        let start = index
        _ = consume(UInt8(ascii: "-"))
        if consume(UInt8(ascii: "0")) {
            if index < bytes.count, Self.isDigit(bytes[index]) { throw failure("a number may not have a leading zero") }
        } else {
            guard digits() else { throw failure("expected a digit") }
        }
        var integral = true
        if consume(UInt8(ascii: ".")) {
            integral = false
            guard digits() else { throw failure("expected a digit after '.'") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard digits() else { throw failure("expected a digit in the exponent") }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if integral {
            // Kept exactly or refused, never rounded into a double.
            guard let integer = Int64(text) else {
                index = start
                throw failure("integer \(text.prefix(40)) does not fit in 64 bits; send it as a string")
            }
            return .integer(integer)
        }
        guard let double = Double(text), double.isFinite else {
            index = start
            throw failure("number \(text.prefix(40)) is out of range")
        }
        return .number(double)
    }

    /// Reads one or more digits; false if there is none.
    private mutating func digits() -> Bool {
        let start = index
        while index < bytes.count, Self.isDigit(bytes[index]) { index += 1 }
        return index > start
    }

    private mutating func literal(_ word: StaticString) throws(Failure) {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count,
            word.withUTF8Buffer({ $0.elementsEqual(UnsafeBufferPointer(rebasing: bytes[index..<index + count])) })
        else { throw failure("unexpected character \(Self.describe(bytes[index]))") }
        index += count
    }

    private mutating func enter() throws(Failure) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw failure("nesting deeper than \(Self.maximumDepth) levels") }
    }

    private mutating func consume(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): index += 1
            default: return
            }
        }
    }

    private func failure(_ message: String) -> Failure {
        Failure(message: message, offset: index)
    }

    /// The string of these bytes, refusing invalid UTF-8 (`String(decoding:)` would repair it).
    private static func utf8(_ bytes: some Collection<UInt8>, at offset: Int) throws(Failure) -> String {
        if bytes.contains(where: { $0 >= 0x80 }) {
            var parser = Unicode.UTF8.ForwardParser()
            var iterator = bytes.makeIterator()
            scalars: while true {
                switch parser.parseScalar(from: &iterator) {
                case .valid: continue
                case .emptyInput: break scalars
                case .error: throw Failure(message: "a string is not valid UTF-8", offset: offset)
                }
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    private static func describe(_ byte: UInt8) -> String {
        (0x21..<0x7F).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
    }
}
