import Foundation

/// The identifier and size rules of PROTOCOL.md, each answering with a message
/// that says which value broke which rule.
package enum ProtocolValidation {
    /// `nil` when `clientID` is valid, else why not.
    package static func clientIDProblem(_ clientID: String) -> String? {
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
    package static func entityProblem(_ entity: String) -> String? {
        let scalars = Array(entity.unicodeScalars)
        guard let first = scalars.first, ("a"..."z").contains(first), scalars.count <= 64,
            scalars.dropFirst().allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" })
        else {
            return "entity \(quoted(entity)) does not match ^[a-z][a-z0-9_]{0,63}$"
        }
        return nil
    }

    /// `nil` when `entityID` is 1 to 128 printable characters, else why not. Characters are
    /// Unicode code points, as JSON Schema counts them (a grapheme may hold hundreds).
    package static func entityIDProblem(_ entityID: String) -> String? {
        let count = entityID.unicodeScalars.count
        guard (1...ProtocolLimits.maxEntityIDLength).contains(count) else {
            return "entityID must be 1 to \(ProtocolLimits.maxEntityIDLength) characters, got \(count)"
        }
        guard entityID.unicodeScalars.allSatisfy(isPrintable) else {
            return "entityID must contain only printable characters"
        }
        return nil
    }

    /// `nil` when `naturalKey` is 1 to 256 characters (code points) other than U+0000, else why not.
    package static func naturalKeyProblem(_ naturalKey: String) -> String? {
        let count = naturalKey.unicodeScalars.count
        guard (1...ProtocolLimits.maxNaturalKeyLength).contains(count) else {
            return "naturalKey must be 1 to \(ProtocolLimits.maxNaturalKeyLength) characters, got \(count)"
        }
        guard !naturalKey.unicodeScalars.contains("\u{0}") else {
            return "naturalKey must not contain U+0000 (NUL)"
        }
        return nil
    }

    /// `nil` when a token's `sub` can name a user: 1 to 256 characters (code points) other than U+0000.
    package static func userIDProblem(_ userID: String) -> String? {
        let count = userID.unicodeScalars.count
        guard (1...256).contains(count), !userID.unicodeScalars.contains("\u{0}") else {
            return "sub must be 1 to 256 characters, none of them U+0000 (NUL), got \(count)"
        }
        // The server keeps a space's records under a name starting with U+0001, which no user may have.
        guard userID.unicodeScalars.first != "\u{1}" else { return "sub must not start with U+0001" }
        return nil
    }

    /// `nil` when data of `bytes` once encoded fits the protocol, else why not.
    package static func dataSizeProblem(_ bytes: Int) -> String? {
        guard bytes > ProtocolLimits.maxDataBytes else { return nil }
        return "data is \(bytes) bytes once encoded; the limit is \(ProtocolLimits.maxDataBytes) (256 KiB)"
    }

    /// `nil` when a mutation's `attachments` are digests, at most
    /// ``ProtocolLimits/maxAttachmentsPerRecord`` of them, else why not.
    package static func attachmentsProblem(_ attachments: [String]) -> String? {
        guard attachments.count <= ProtocolLimits.maxAttachmentsPerRecord else {
            return "attachments names \(attachments.count) digests; a record may reference at most \(ProtocolLimits.maxAttachmentsPerRecord)"
        }
        for (index, text) in attachments.enumerated() where AttachmentDigest(text) == nil {
            return "attachments[\(index)]: " + AttachmentDigest.problem(with: text)
        }
        return nil
    }

    /// Encodes a record's data as stored and sent: compact JSON, keys sorted (`JSONTextWriter.value`).
    package static func encode(_ data: JSONObject) throws -> Data {
        var json = JSONTextWriter(capacity: 256)
        guard json.value(.object(data)) else {
            throw EncodingError.invalidValue(
                data,
                EncodingError.Context(codingPath: [], debugDescription: "a number is not finite; JSON has no form for it")
            )
        }
        return Data(json.bytes)
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
    package func rejectionReason(encodedDataBytes: Int? = nil) -> String? {
        if let problem = ProtocolValidation.entityProblem(entity) { return problem }
        if let problem = ProtocolValidation.entityIDProblem(entityID) { return problem }
        if let space, let problem = ProtocolValidation.spaceIDProblem(space) { return problem }
        if let spaceIncarnation {
            guard space != nil else { return "spaceIncarnation is only allowed with space" }
            guard (1...64).contains(spaceIncarnation.utf8.count) else {
                return "spaceIncarnation must be 1 to 64 bytes, as a membership's incarnation is, got \(spaceIncarnation.utf8.count)"
            }
        }
        if let changedAt, !(0...ProtocolLimits.maxMutationID).contains(changedAt) {
            return "changedAt must be milliseconds since 1970, 0 to 2^53-1, got \(changedAt)"
        }
        switch op {
        case .upsert:
            guard let data else { return "data is required for an upsert" }
            if let naturalKey, let problem = ProtocolValidation.naturalKeyProblem(naturalKey) { return problem }
            if let baseVersion, baseVersion < 0 { return "baseVersion must be 0 or more, got \(baseVersion)" }
            guard let size = encodedDataBytes ?? (try? ProtocolValidation.encode(data).count) else {
                return "data holds a number that is not finite, which JSON cannot carry"
            }
            if let problem = ProtocolValidation.dataSizeProblem(size) { return problem }
            if let attachments, let problem = ProtocolValidation.attachmentsProblem(attachments) { return problem }
        case .delete:
            if data != nil { return "data must be absent for a delete" }
            if naturalKey != nil { return "naturalKey is only allowed on an upsert" }
            if attachments != nil { return "attachments are only allowed on an upsert (a deleted record references none)" }
            if let baseVersion, baseVersion < 0 { return "baseVersion must be 0 or more, got \(baseVersion)" }
        }
        return nil
    }
}

extension PushRequest {
    /// Checks the rules that concern the batch as a whole: the client id, the
    /// number of mutations and the order and range of their ids.
    package func validateBatch() throws(ProtocolViolation) {
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
