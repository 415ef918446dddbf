import FerryProtocol
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
/// mutation answered (entity, entityID, op) to tell a resend from another change reusing the
/// id (a store copied to a second device, or restored from a backup). A conflict's `current`
/// is not kept: a replay reports the record as it is then.
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

        func answers(_ mutation: Mutation) -> Bool {
            fingerprint == RecentResults.fingerprint(of: mutation)
        }

        /// The result as first answered to `mutation`.
        func result(for mutation: Mutation) -> PushResult {
            PushResult(id: id, status: status, entityID: entityID ?? mutation.entityID, version: version, error: error)
        }
    }

    static func encode(_ results: [PushResult], of mutations: [IncomingMutation]) -> Data {
        var json = JSONTextWriter(capacity: 16 + results.count * 48)
        json.raw("[")
        for (index, (result, incoming)) in zip(results, mutations).enumerated() {
            if index > 0 { json.raw(",") }
            json.raw("[")
            json.integer(result.id)
            json.raw(",")
            json.string(result.status.rawValue)
            json.raw(",")
            if let version = result.version { json.integer(version) } else { json.raw("null") }
            json.raw(",")
            switch result.entityID {
            case let entityID? where entityID.hasSameBytes(as: incoming.mutation.entityID): json.raw("0")
            case let entityID?: json.string(entityID)
            case nil: json.raw("null")
            }
            json.raw(",")
            if let error = result.error { json.string(error) } else { json.raw("null") }
            json.raw(",")
            json.integer(fingerprint(of: incoming.mutation))
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
                guard case .array(let fields) = value, fields.count == 6, case .integer(let id) = fields[0],
                    case .string(let status) = fields[1], let status = MutationStatus(rawValue: status),
                    case .integer(let fingerprint) = fields[5]
                else { throw StorageError.corrupt("a client's recent push results hold an entry that is not [id, status, version, entityID, error, fingerprint]") }
                let entityID: String?? =
                    switch fields[3] {
                    case .string(let entityID): .some(entityID)
                    case .null: .some(nil)
                    default: nil
                    }
                let version: Int64? = if case .integer(let version) = fields[2] { version } else { nil }
                let error: String? = if case .string(let error) = fields[4] { error } else { nil }
                kept[id] = Kept(id: id, status: status, version: version, entityID: entityID, error: error, fingerprint: fingerprint)
            }
        }
        return kept
    }

    /// FNV-1a over the mutation's entity, entityID and op, as UTF-8 bytes.
    static func fingerprint(of mutation: Mutation) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for part in [mutation.entity, mutation.entityID, mutation.op.rawValue] {
            for byte in part.utf8 {
                hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
            }
            hash = (hash ^ 0xff) &* 0x100_0000_01b3  // a separator no UTF-8 byte equals
        }
        return Int64(bitPattern: hash)
    }
}
