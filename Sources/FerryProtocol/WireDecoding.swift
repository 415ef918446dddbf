import Foundation

// The wire types are read from a `JSONReader` tree rather than through `Codable`: a push
// or pull of 500 records decoded with `JSONDecoder` cost about as much as storing them.
// Unknown fields are ignored; the first field that is missing or mistyped is named by its
// path, like `mutations[3].id: expected a whole number, got 1.5`.

extension PushRequest {
    /// Decodes a push body; what is wrong with it is a `bad_request`.
    package static func decode(from body: Data) throws(ProtocolViolation) -> PushRequest {
        do {
            let fields = try JSONFields.root(body)
            return PushRequest(
                clientID: try fields.required("clientID", JSONFields.string),
                mutations: try fields.elements("mutations", Mutation.init)
            )
        } catch {
            throw .badRequest(error.message)
        }
    }
}

extension PushResponse {
    package static func decode(from body: Data) throws(JSONShapeError) -> PushResponse {
        let fields = try JSONFields.root(body)
        return PushResponse(
            lastMutationID: try fields.required("lastMutationID", JSONFields.integer),
            results: try fields.elements("results", PushResult.tolerating)
        )
    }
}

extension PullResponse {
    package static func decode(from body: Data) throws(JSONShapeError) -> PullResponse {
        var unrecognized: [UnrecognizedChange] = []
        return try decode(from: body, unrecognized: &unrecognized)
    }

    /// Decodes a page as this version knows it: a change whose `op` it does not know (a later
    /// server's) is left out and described in `unrecognized`, the rest of the page used.
    package static func decode(from body: Data, unrecognized: inout [UnrecognizedChange]) throws(JSONShapeError) -> PullResponse {
        let fields = try JSONFields.root(body)
        var changes: [Change] = []
        for change in try fields.elements("changes", { $0 }) {
            if let op = change.fields["op"].flatMap(JSONFields.string), MutationOp(rawValue: op) == nil {
                let (entity, entityID) = (change.fields["entity"].flatMap(JSONFields.string), change.fields["entityID"].flatMap(JSONFields.string))
                let named = [entity, entityID].compactMap { $0 }.joined(separator: "/")
                unrecognized.append(
                    UnrecognizedChange(
                        record: entity.flatMap { entity in entityID.map { RecordRef(entity: entity, entityID: $0) } },
                        description: "\(change.objectPath) (\(named)): op \(ProtocolValidation.quoted(op))"
                    )
                )
                continue
            }
            changes.append(try Change(change))
        }
        return PullResponse(
            changes: changes,
            cursor: try fields.required("cursor", JSONFields.string),
            hasMore: try fields.required("hasMore", JSONFields.bool),
            spaces: fields.fields["spaces"].map { $0 == .null } ?? true ? nil : try fields.elements("spaces", Membership.init),
            revoked: try fields.strings("revoked")
        )
    }
}

/// A pulled change this version does not know (a later server's op), left out of its page.
package struct UnrecognizedChange: Sendable, CustomStringConvertible {
    /// The record it changes, when it names one.
    package var record: RecordRef?
    /// Where it was and what it is, for the journal.
    package var description: String
}

extension Mutation {
    init(_ fields: JSONFields) throws(JSONShapeError) {
        self.init(
            id: try fields.required("id", JSONFields.integer),
            entity: try fields.required("entity", JSONFields.string),
            entityID: try fields.required("entityID", JSONFields.string),
            op: try fields.required("op", JSONFields.enumeration(MutationOp.self)),
            data: try fields.optional("data", JSONFields.object),
            naturalKey: try fields.optional("naturalKey", JSONFields.string),
            baseVersion: try fields.optional("baseVersion", JSONFields.integer),
            changedAt: try fields.optional("changedAt", JSONFields.integer),
            space: try fields.optional("space", JSONFields.string),
            spaceIncarnation: try fields.optional("spaceIncarnation", JSONFields.string),
            attachments: fields.fields["attachments"].map { $0 == .null } ?? true ? nil : try fields.strings("attachments")
        )
    }
}

extension PushResult {
    init(_ fields: JSONFields) throws(JSONShapeError) {
        try self.init(fields, status: fields.required("status", JSONFields.enumeration(MutationStatus.self)))
    }

    private init(_ fields: JSONFields, status: MutationStatus) throws(JSONShapeError) {
        self.init(
            id: try fields.required("id", JSONFields.integer),
            status: status,
            entityID: try fields.optional("entityID", JSONFields.string),
            version: try fields.optional("version", JSONFields.integer),
            current: try fields.optionalObject("current", RecordState.init),
            error: try fields.optional("error", JSONFields.string),
            code: try fields.optional("code", JSONFields.string),
            details: try fields.optional("details", JSONFields.object)
        )
    }

    /// Reads a result; one whose `status` this version does not know (a later server's) reads
    /// as `rejected` with ``PushResult/unrecognizedStatus``, every other field as sent (the
    /// server's `current` comes back to the row): the change is kept as a dead letter with its
    /// payload, the rest of the answer used.
    static func tolerating(_ fields: JSONFields) throws(JSONShapeError) -> PushResult {
        guard let status = fields.fields["status"].flatMap(JSONFields.string), MutationStatus(rawValue: status) == nil else {
            return try PushResult(fields)
        }
        var result = try PushResult(fields, status: .rejected)
        result.error = "the server answered \(ProtocolValidation.quoted(status)), a status this version of the app does not know; the change is kept"
        result.code = PushResult.unrecognizedStatus
        return result
    }
}

extension RecordState {
    init(_ fields: JSONFields) throws(JSONShapeError) {
        self.init(
            version: try fields.required("version", JSONFields.integer),
            deleted: try fields.required("deleted", JSONFields.bool),
            data: try fields.optional("data", JSONFields.object),
            naturalKey: try fields.optional("naturalKey", JSONFields.string),
            changedAt: try fields.optional("changedAt", JSONFields.integer)
        )
    }
}

extension Change {
    init(_ fields: JSONFields) throws(JSONShapeError) {
        self.init(
            entity: try fields.required("entity", JSONFields.string),
            entityID: try fields.required("entityID", JSONFields.string),
            op: try fields.required("op", JSONFields.enumeration(MutationOp.self)),
            version: try fields.required("version", JSONFields.integer),
            naturalKey: try fields.optional("naturalKey", JSONFields.string),
            data: try fields.optional("data", JSONFields.object),
            space: try fields.optional("space", JSONFields.string)
        )
    }
}

extension Membership {
    init(_ fields: JSONFields) throws(JSONShapeError) {
        self.init(
            space: try fields.required("space", JSONFields.string),
            role: SpaceRole(tolerating: try fields.required("role", JSONFields.string)),
            incarnation: try fields.optional("incarnation", JSONFields.string)
        )
    }
}

/// A wire value that is not JSON, or not of the shape PROTOCOL.md gives it.
package struct JSONShapeError: Error, Sendable, CustomStringConvertible {
    package var message: String
    package var description: String { message }
}

/// The fields of one JSON object of a wire value, read with errors that name their path.
struct JSONFields {
    let fields: [String: JSONValue]
    let objectPath: String

    init(_ value: JSONValue, path: String) throws(JSONShapeError) {
        guard case .object(let fields) = value else {
            throw JSONShapeError(message: "\(path): expected a JSON object, got \(Self.kind(value))")
        }
        self.fields = fields
        objectPath = path
    }

    /// The fields of a whole body.
    static func root(_ body: Data) throws(JSONShapeError) -> JSONFields {
        let value: JSONValue
        do {
            value = try JSONReader.parse(body)
        } catch {
            throw JSONShapeError(message: "body is not valid JSON (\(error))")
        }
        return try JSONFields(value, path: "body")
    }

    func path(_ key: String) -> String {
        objectPath == "body" ? key : "\(objectPath).\(key)"
    }

    /// A field that must be present and not null.
    func required<T>(_ key: String, _ read: (JSONValue) -> T?) throws(JSONShapeError) -> T {
        guard let value = fields[key] else { throw JSONShapeError(message: "\(path(key)): is required") }
        return try convert(value, key: key, read)
    }

    /// A field that may be absent or null.
    func optional<T>(_ key: String, _ read: (JSONValue) -> T?) throws(JSONShapeError) -> T? {
        guard let value = fields[key], value != .null else { return nil }
        return try convert(value, key: key, read)
    }

    /// A required array of objects, each read by `element`.
    func elements<T>(_ key: String, _ element: (JSONFields) throws(JSONShapeError) -> T) throws(JSONShapeError) -> [T] {
        let values = try required(key, Self.array)
        var result: [T] = []
        result.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            result.append(try element(JSONFields(value, path: "\(path(key))[\(index)]")))
        }
        return result
    }

    /// An array of strings that may be absent (empty then).
    func strings(_ key: String) throws(JSONShapeError) -> [String] {
        guard let value = fields[key], value != .null else { return [] }
        var result: [String] = []
        for (index, element) in try convert(value, key: key, Self.array).enumerated() {
            guard let string = Self.string(element) else {
                throw JSONShapeError(message: "\(path(key))[\(index)]: expected a string, got \(Self.kind(element))")
            }
            result.append(string)
        }
        return result
    }

    /// An object that may be absent or null, read by `read`.
    func optionalObject<T>(_ key: String, _ read: (JSONFields) throws(JSONShapeError) -> T) throws(JSONShapeError) -> T? {
        guard let value = fields[key], value != .null else { return nil }
        return try read(JSONFields(value, path: path(key)))
    }

    private func convert<T>(_ value: JSONValue, key: String, _ read: (JSONValue) -> T?) throws(JSONShapeError) -> T {
        if let result = read(value) { return result }
        let expected: String
        switch T.self {
        case is Int64.Type: expected = "a whole number"
        case is Bool.Type: expected = "true or false"
        case is [JSONValue].Type: expected = "an array"
        case is JSONObject.Type: expected = "a JSON object"
        case let type as any (CaseIterable & RawRepresentable<String>).Type:
            let names = type.allCases.compactMap { ($0 as? any RawRepresentable<String>)?.rawValue }.map { "\"\($0)\"" }
            expected = "one of " + names.joined(separator: ", ")
        default: expected = "a string"
        }
        throw JSONShapeError(message: "\(path(key)): expected \(expected), got \(Self.kind(value))")
    }

    static func string(_ value: JSONValue) -> String? {
        if case .string(let string) = value { string } else { nil }
    }

    static func integer(_ value: JSONValue) -> Int64? {
        if case .integer(let integer) = value { integer } else { nil }
    }

    static func bool(_ value: JSONValue) -> Bool? {
        if case .bool(let bool) = value { bool } else { nil }
    }

    static func array(_ value: JSONValue) -> [JSONValue]? {
        if case .array(let array) = value { array } else { nil }
    }

    static func object(_ value: JSONValue) -> JSONObject? {
        if case .object(let object) = value { object } else { nil }
    }

    static func enumeration<T: RawRepresentable<String> & CaseIterable>(_ type: T.Type) -> (JSONValue) -> T? {
        { value in string(value).flatMap(T.init(rawValue:)) }
    }

    /// What a value is, for messages: `null`, a quoted string, or the number itself.
    static func kind(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let bool): "\(bool)"
        case .integer(let integer): "\(integer)"
        case .number(let number): "\(number)"
        case .string(let string): ProtocolValidation.quoted(string)
        case .array: "an array"
        case .object: "a JSON object"
        }
    }
}
