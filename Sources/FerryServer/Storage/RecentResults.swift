import FerryProtocol
import FerryRules
import Foundation

/// The results of a client's two most recent pushes that processed new mutations, kept so
/// that a resent mutation is answered with the result it got the first time (PROTOCOL.md,
/// rule 1). Each push's results are one row of `client_results`, in one of two slots.
///
/// A push keeps all its results, resent ones included: a mutation the client keeps resending
/// because the answers keep getting lost stays in the newest push. Two pushes are enough for
/// a client that sends a batch only once the one before it was answered, and reads it only
/// once the one before that was applied: its unapplied answers are those of the batch on the
/// wire and the one answered just before.
///
/// Stored compactly, one array per result: `[id, status, version, entityID, error, fingerprint]`,
/// where `entityID` is `0` when it is the mutation's own, and `fingerprint` identifies the
/// mutation answered (all it says, data included) to tell a resend from another change
/// reusing the id (a store copied to a second device, or restored from a backup). A conflict's `current`
/// is not kept: a replay reports the record as it is then; so does the replay of a write the
/// app's rule rewrote (a seventh and eighth entry: the code, then `{"rewritten": true}` and the
/// rule's `details`).
enum RecentResults {
    /// A kept result and the fingerprint of the mutation it answered.
    struct Kept: Sendable {
        var id: Int64
        var status: MutationStatus
        var version: Int64?
        /// `nil` when it is the mutation's own id; `.some(nil)` when the result names no record.
        var entityID: String??
        var error: String?
        var fingerprint: Int64
        /// The rejection's `code`, when it has one (`forbidden`).
        var code: String? = nil
        /// Whether the app's rule rewrote the write: a replay reports the record as it is then.
        var rewritten = false
        /// The app's rule's `details` of its rejection.
        var details: JSONObject? = nil

        func answers(_ incoming: IncomingMutation) -> Bool {
            fingerprint == RecentResults.fingerprint(of: incoming)
        }

        /// The result as first answered to `mutation`.
        func result(for mutation: Mutation) -> PushResult {
            PushResult(id: id, status: status, entityID: entityID ?? mutation.entityID, version: version, error: error, code: code, details: details)
        }
    }

    /// The rejections' codes a resend is answered with again (and every app's code, `app.…`);
    /// others are kept as their message alone.
    static let keptCodes: Set<String> = [ErrorCode.forbidden.rawValue, ErrorCode.spaceDeleted.rawValue, ErrorCode.attachmentMissing.rawValue]

    static func keeps(_ code: String?) -> Bool {
        code.map(keptCodes.contains) == true || isRuleCode(code)
    }

    /// Whether `code` is the app's rules' (`app.…`, `rule_failed`): its replay carries the record again.
    static func isRuleCode(_ code: String?) -> Bool {
        guard let code else { return false }
        return code == ErrorCode.ruleFailed.rawValue || code.hasPrefix(RuleRejection.namespace)
    }

    /// A push's results as kept: each new mutation's result, and each resent mutation's kept
    /// result as it was (a `duplicate`, or a rejection of a reused id, is worked out again).
    static func encode(_ results: [PushResult], of mutations: [IncomingMutation], lastMutationID: Int64, replays: [Int64: Kept]) -> Data {
        var json = JSONTextWriter(capacity: 16 + results.count * 48)
        json.raw("[")
        var first = true
        for (result, incoming) in zip(results, mutations) {
            let kept: Kept
            if result.id > lastMutationID {
                let entityID: String??
                switch result.entityID {
                case let own? where own.hasSameBytes(as: incoming.mutation.entityID): entityID = nil
                case let other?: entityID = .some(other)
                case nil: entityID = .some(nil)
                }
                kept = Kept(
                    id: result.id,
                    status: result.status,
                    version: result.version,
                    entityID: entityID,
                    error: result.error,
                    fingerprint: fingerprint(of: incoming),
                    code: keeps(result.code) ? result.code : nil,
                    rewritten: (result.status == .applied || result.status == .merged) && result.current != nil,
                    details: result.details
                )
            } else if let replayed = replays[result.id], replayed.status != .duplicate {
                kept = replayed
            } else {
                continue
            }
            if !first { json.raw(",") }
            first = false
            json.raw("[")
            json.integer(kept.id)
            json.raw(",")
            json.string(kept.status.rawValue)
            json.raw(",")
            if let version = kept.version { json.integer(version) } else { json.raw("null") }
            json.raw(",")
            switch kept.entityID {
            case nil: json.raw("0")
            case .some(let entityID?): json.string(entityID)
            case .some(nil): json.raw("null")
            }
            json.raw(",")
            if let error = kept.error { json.string(error) } else { json.raw("null") }
            json.raw(",")
            json.integer(kept.fingerprint)
            if kept.code != nil || kept.rewritten || kept.details != nil {
                json.raw(",")
                if let code = kept.code { json.string(code) } else { json.raw("null") }
            }
            if kept.rewritten || kept.details != nil {
                var extras: JSONObject = [:]
                if kept.rewritten { extras["rewritten"] = .bool(true) }
                if let details = kept.details { extras["details"] = .object(details) }
                json.raw(",")
                _ = json.value(.object(extras))  // finite: the details were written in the answer already
            }
            json.raw("]")
        }
        json.raw("]")
        return Data(json.bytes)
    }

    /// The kept results of a client's pushes, oldest first, by mutation id (a later push's
    /// result for an id replaces an earlier one's).
    static func decode(_ pushes: [Data]) throws -> [Int64: Kept] {
        var kept: [Int64: Kept] = [:]
        for data in pushes {
            guard case .array(let results) = try? JSONReader.parse(data) else {
                throw StorageError.corrupt("a client's recent push results are not a JSON array")
            }
            for value in results {
                guard case .array(let fields) = value, (6...8).contains(fields.count), case .integer(let id) = fields[0],
                    case .string(let status) = fields[1], let status = MutationStatus(rawValue: status),
                    case .integer(let fingerprint) = fields[5]
                else {
                    throw StorageError.corrupt(
                        "a client's recent push results hold an entry that is not [id, status, version, entityID, error, fingerprint]"
                    )
                }
                let entityID: String?? =
                    switch fields[3] {
                    case .string(let entityID): .some(entityID)
                    case .null: .some(nil)
                    default: nil
                    }
                let version: Int64? = if case .integer(let version) = fields[2] { version } else { nil }
                let error: String? = if case .string(let error) = fields[4] { error } else { nil }
                let code: String? = if fields.count >= 7, case .string(let code) = fields[6] { code } else { nil }
                let extras: JSONObject = if fields.count == 8, case .object(let extras) = fields[7] { extras } else { [:] }
                let details: JSONObject? = if case .object(let details) = extras["details"] { details } else { nil }
                kept[id] = Kept(
                    id: id,
                    status: status,
                    version: version,
                    entityID: entityID,
                    error: error,
                    fingerprint: fingerprint,
                    code: code,
                    rewritten: extras["rewritten"] == .bool(true),
                    details: details
                )
            }
        }
        return kept
    }

    /// FNV-1a over everything the mutation says: entity, entityID, op, natural key, base
    /// version and its data as stored, as UTF-8 bytes.
    static func fingerprint(of incoming: IncomingMutation) -> Int64 {
        let mutation = incoming.mutation
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func add(_ bytes: some Sequence<UInt8>) {
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            hash = (hash ^ 0xff) &* 0x100_0000_01b3  // a separator no UTF-8 byte equals
        }
        add(mutation.entity.utf8)
        add(mutation.entityID.utf8)
        add(mutation.op.rawValue.utf8)
        add((mutation.naturalKey ?? "").utf8)
        add(mutation.baseVersion.map { "\($0)" }?.utf8 ?? "".utf8)
        add(incoming.encodedData ?? Data())
        // Only a mutation into a space says one: personal mutations keep the fingerprints they had.
        if let space = mutation.space { add(space.utf8) }
        // Likewise its incarnation: mutations without one keep theirs.
        if let incarnation = mutation.spaceIncarnation { add(incarnation.utf8) }
        // And its attachments: mutations without them keep theirs.
        for digest in mutation.attachments ?? [] { add(digest.utf8) }
        return Int64(bitPattern: hash)
    }
}
