import Foundation

/// The identifier and size rules of PROTOCOL.md, each answering with a message
/// that says which value broke which rule.
public enum ProtocolValidation {
    /// `nil` when `clientID` is valid, else why not.
    public static func clientIDProblem(_ clientID: String) -> String? {
        let count = clientID.unicodeScalars.count
        guard (1...ProtocolLimits.maxClientIDLength).contains(count) else {
            return "clientID must be 1 to \(ProtocolLimits.maxClientIDLength) characters, got \(count)"
        }
        guard clientID.unicodeScalars.allSatisfy(isClientIDScalar) else {
            return "clientID may contain only A-Z a-z 0-9 _ -"
        }
        return nil
    }

    /// `nil` when `entity` matches `^[a-z][a-z0-9_]{0,63}$`, else why not.
    public static func entityProblem(_ entity: String) -> String? {
        let scalars = Array(entity.unicodeScalars)
        guard let first = scalars.first, ("a"..."z").contains(first), scalars.count <= 64,
            scalars.dropFirst().allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" })
        else {
            return "entity \(quoted(entity)) does not match ^[a-z][a-z0-9_]{0,63}$"
        }
        return nil
    }

    /// `nil` when `entityID` is 1 to 128 printable characters, else why not.
    public static func entityIDProblem(_ entityID: String) -> String? {
        let count = entityID.count
        guard (1...ProtocolLimits.maxEntityIDLength).contains(count) else {
            return "entityID must be 1 to \(ProtocolLimits.maxEntityIDLength) characters, got \(count)"
        }
        guard entityID.unicodeScalars.allSatisfy(isPrintable) else {
            return "entityID must contain only printable characters"
        }
        return nil
    }

    /// `nil` when `naturalKey` is 1 to 256 characters, else why not.
    public static func naturalKeyProblem(_ naturalKey: String) -> String? {
        let count = naturalKey.count
        guard (1...ProtocolLimits.maxNaturalKeyLength).contains(count) else {
            return "naturalKey must be 1 to \(ProtocolLimits.maxNaturalKeyLength) characters, got \(count)"
        }
        return nil
    }

    /// The encoder for record data as stored and sent: compact JSON with sorted keys.
    /// Make one per batch and reuse it; creating an encoder costs more than encoding a small record.
    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// Encodes a record's data as stored and sent.
    public static func encode(_ data: JSONObject, using encoder: JSONEncoder = makeEncoder()) throws -> Data {
        try encoder.encode(data)
    }

    static func quoted(_ value: String) -> String {
        let shown = value.count > 80 ? String(value.prefix(80)) + "…" : value
        return "\"\(shown)\""
    }

    private static func isClientIDScalar(_ scalar: Unicode.Scalar) -> Bool {
        ("A"..."Z").contains(scalar) || ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)
            || scalar == "_" || scalar == "-"
    }

    private static func isPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator, .paragraphSeparator:
            false
        default:
            true
        }
    }
}

extension Mutation {
    /// Why this mutation must be `rejected`, or `nil` when it may be applied.
    /// `encodedDataBytes` is the size of `data` once encoded, when the caller has already encoded it.
    public func rejectionReason(encodedDataBytes: Int? = nil) -> String? {
        if let problem = ProtocolValidation.entityProblem(entity) { return problem }
        if let problem = ProtocolValidation.entityIDProblem(entityID) { return problem }
        switch op {
        case .upsert:
            guard let data else { return "data is required for an upsert" }
            if let naturalKey, let problem = ProtocolValidation.naturalKeyProblem(naturalKey) { return problem }
            if let baseVersion, baseVersion < 0 { return "baseVersion must be 0 or more, got \(baseVersion)" }
            let size = encodedDataBytes ?? (try? ProtocolValidation.encode(data).count) ?? Int.max
            if size > ProtocolLimits.maxDataBytes {
                return "data is \(size) bytes once encoded; the limit is \(ProtocolLimits.maxDataBytes) (256 KiB)"
            }
        case .delete:
            if data != nil { return "data must be absent for a delete" }
            if naturalKey != nil { return "naturalKey is only allowed on an upsert" }
            if baseVersion != nil { return "baseVersion is only allowed on an upsert" }
        }
        return nil
    }
}

extension PushRequest {
    /// Decodes a push body, naming the first field that is missing or mistyped.
    public static func decode(from body: Data) throws(ProtocolViolation) -> PushRequest {
        do {
            return try JSONDecoder().decode(PushRequest.self, from: body)
        } catch let error as DecodingError {
            throw .badRequest(DecodingFailure.nonIntegerField(in: body) ?? DecodingFailure.describe(error))
        } catch {
            throw .badRequest("body is not valid JSON: \(error)")
        }
    }

    /// Checks the rules that concern the batch as a whole: the client id, the
    /// number of mutations and the order and range of their ids.
    public func validateBatch() throws(ProtocolViolation) {
        if let problem = ProtocolValidation.clientIDProblem(clientID) { throw .badRequest(problem) }
        if mutations.count > ProtocolLimits.maxMutationsPerPush {
            throw ProtocolViolation(
                .batchTooLarge,
                "the batch has \(mutations.count) mutations; a push may carry at most \(ProtocolLimits.maxMutationsPerPush) mutations and \(ProtocolLimits.maxPushBodyBytes) bytes (4 MiB)"
            )
        }
        var previous: Int64 = 0
        for (index, mutation) in mutations.enumerated() {
            guard (1...ProtocolLimits.maxMutationID).contains(mutation.id) else {
                throw .badRequest("mutations[\(index)].id must be 1 to \(ProtocolLimits.maxMutationID), got \(mutation.id)")
            }
            guard mutation.id > previous else {
                throw .badRequest(
                    "mutations[\(index)].id is \(mutation.id) but follows \(previous): ids must be strictly increasing within a batch"
                )
            }
            previous = mutation.id
        }
    }
}

/// Turns a `DecodingError` into one line that names the field, like `mutations[3].id: expected an integer`.
enum DecodingFailure {
    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(typeName(type))"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): expected \(typeName(type)), got null"
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath + [key])): is required"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return "body is not valid JSON (\(context.underlyingError.map { "\($0)" } ?? context.debugDescription))"
            }
            if context.codingPath.last?.stringValue == "op" {
                return "\(path(context.codingPath)): must be \"upsert\" or \"delete\""
            }
            return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    /// Foundation reports a fractional or out-of-range number where an integer is expected
    /// as invalid JSON without a path; find such a field ourselves so the message names it.
    static func nonIntegerField(in body: Data) -> String? {
        guard let root = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
            let mutations = root["mutations"] as? [Any]
        else { return nil }
        for (index, element) in mutations.enumerated() {
            guard let mutation = element as? [String: Any] else { continue }
            for field in ["id", "baseVersion"] {
                guard let number = mutation[field] as? NSNumber, !(mutation[field] is Bool) else { continue }
                if Int64(exactly: number.doubleValue) == nil || number.doubleValue.rounded() != number.doubleValue
                    || "\(number)".contains(".") || "\(number)".lowercased().contains("e")
                {
                    return "mutations[\(index)].\(field): expected a whole number, got \(number)"
                }
            }
        }
        return nil
    }

    static func path(_ codingPath: [any CodingKey]) -> String {
        guard !codingPath.isEmpty else { return "body" }
        var result = ""
        for key in codingPath {
            if let index = key.intValue {
                result += "[\(index)]"
            } else {
                result += result.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return result
    }

    static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is Int64.Type, is Int.Type: "an integer"
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Double.Type: "a number"
        case is [Mutation].Type, is [JSONValue].Type: "an array"
        case is [String: Any].Type, is JSONObject.Type, is Mutation.Type, is PushRequest.Type: "a JSON object"
        default: "\(type)"
        }
    }
}
