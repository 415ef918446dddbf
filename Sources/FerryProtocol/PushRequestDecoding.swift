import Foundation

extension PushRequest {
    /// Decodes a push body, naming the first field that is missing or mistyped, like
    /// `mutations[3].id: expected a whole number, got 1.5`. Unknown fields are ignored.
    public static func decode(from body: Data) throws(ProtocolViolation) -> PushRequest {
        let root: JSONValue
        do {
            root = try JSONReader.parse(body)
        } catch {
            throw .badRequest("body is not valid JSON (\(error))")
        }
        let fields = try JSONFields(root, path: "body")
        let mutations = try fields.required("mutations", JSONFields.array).enumerated().map { index, element throws(ProtocolViolation) in
            try Mutation(JSONFields(element, path: "mutations[\(index)]"))
        }
        return PushRequest(clientID: try fields.required("clientID", JSONFields.string), mutations: mutations)
    }
}

extension Mutation {
    init(_ fields: JSONFields) throws(ProtocolViolation) {
        let op = try fields.required("op", JSONFields.string)
        guard let known = MutationOp(rawValue: op) else {
            throw .badRequest("\(fields.path("op")): must be \"upsert\" or \"delete\", got \(ProtocolValidation.quoted(op))")
        }
        self.init(
            id: try fields.required("id", JSONFields.integer),
            entity: try fields.required("entity", JSONFields.string),
            entityID: try fields.required("entityID", JSONFields.string),
            op: known,
            data: try fields.optional("data", JSONFields.object),
            naturalKey: try fields.optional("naturalKey", JSONFields.string),
            baseVersion: try fields.optional("baseVersion", JSONFields.integer)
        )
    }
}

/// The fields of a JSON object in a request, read with errors that name their path.
struct JSONFields {
    let fields: [String: JSONValue]
    let objectPath: String

    init(_ value: JSONValue, path: String) throws(ProtocolViolation) {
        guard case .object(let fields) = value else { throw .badRequest("\(path): expected a JSON object, got \(Self.kind(value))") }
        self.fields = fields
        objectPath = path
    }

    func path(_ key: String) -> String {
        objectPath == "body" ? key : "\(objectPath).\(key)"
    }

    /// A field that must be present and not null.
    func required<T>(_ key: String, _ read: (JSONValue) -> T?) throws(ProtocolViolation) -> T {
        guard let value = fields[key] else { throw .badRequest("\(path(key)): is required") }
        return try convert(value, key: key, read)
    }

    /// A field that may be absent or null.
    func optional<T>(_ key: String, _ read: (JSONValue) -> T?) throws(ProtocolViolation) -> T? {
        guard let value = fields[key], value != .null else { return nil }
        return try convert(value, key: key, read)
    }

    private func convert<T>(_ value: JSONValue, key: String, _ read: (JSONValue) -> T?) throws(ProtocolViolation) -> T {
        if let result = read(value) { return result }
        let expected: String
        switch T.self {
        case is Int64.Type: expected = "a whole number"
        case is String.Type: expected = "a string"
        case is [JSONValue].Type: expected = "an array"
        default: expected = "a JSON object"
        }
        throw .badRequest("\(path(key)): expected \(expected), got \(Self.kind(value))")
    }

    static func string(_ value: JSONValue) -> String? {
        if case .string(let string) = value { string } else { nil }
    }

    static func integer(_ value: JSONValue) -> Int64? {
        if case .integer(let integer) = value { integer } else { nil }
    }

    static func array(_ value: JSONValue) -> [JSONValue]? {
        if case .array(let array) = value { array } else { nil }
    }

    static func object(_ value: JSONValue) -> JSONObject? {
        if case .object(let object) = value { object } else { nil }
    }

    /// What a value is, for messages: `null`, `a string`, or the number itself.
    static func kind(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let bool): "\(bool)"
        case .integer(let integer): "\(integer)"
        case .number(let number): "\(number)"
        case .string: "a string"
        case .array: "an array"
        case .object: "a JSON object"
        }
    }
}
