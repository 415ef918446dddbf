/// Any JSON value, kept exactly as received: integers stay integers so that
/// record data survives a round trip through the server unchanged.
public enum JSONValue: Sendable, Hashable, Codable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A whole number that fits 64 bits (as the protocol's reader sees it: written without a
    /// fraction or exponent; `Codable` decoding also takes `1e3` or `2.0` as whole).
    case integer(Int64)
    /// Any other number.
    case number(Double)
    /// A string.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object; keys are unique.
    case object([String: JSONValue])

    /// Decodes whichever JSON value the decoder holds: a number that decodes as `Int64` becomes `integer`, any other
    /// becomes `number`. Throws `DecodingError` when the value is none of the cases.
    public init(from decoder: any Decoder) throws {
        // Most likely types first: every failed attempt costs a thrown DecodingError.
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    /// Encodes the value as the JSON it holds; an `integer` is written without a fraction.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

extension JSONValue {
    /// The string, for a `string`; else `nil`.
    public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    /// The number, for an `integer` or a `number`; else `nil`.
    public var numberValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .number(let value): value
        default: nil
        }
    }
    /// The value, for a `bool`; else `nil`.
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
}

/// A record's data: always a JSON object.
public typealias JSONObject = [String: JSONValue]
