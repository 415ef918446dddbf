import FerryProtocol
import Foundation

/// A mutation as a batch carries it: an upsert's data is still the JSON text stored with its
/// outbox entry, spliced into the request as is (it was written by SQLite's `json_object`
/// or `json`, or by Ferry's encoder, so it is valid JSON).
struct OutgoingMutation: Sendable, Equatable {
    var id: Int64
    var entity: String
    var entityID: String
    var op: MutationOp
    /// An upsert's data as stored; `nil` for a delete.
    var dataText: String?
    var naturalKey: String?
    var baseVersion: Int64?
    /// When the change was queued, in milliseconds since 1970 (`Mutation.changedAt`).
    var changedAt: Int64?
    /// The space of the record; `nil` for the personal space.
    var space: String?
    /// The incarnation of `space` the store knew when the change was made (`Mutation.spaceIncarnation`).
    var spaceIncarnation: String?
    /// The attachments the record references (`Mutation.attachments`); `nil` for a table without
    /// attachment columns, whose mutations say nothing of them.
    var attachments: [String]?
    /// The row as it was before the first of the changes this mutation stands for, for a
    /// conflict policy (`Conflict.base`); not sent.
    var baseText: String?

    /// A mutation's share of a request body besides its data, id and natural key: field names,
    /// punctuation, the entity, numbers (an upper bound, for `Outbox.bodyBudget`).
    static let envelopeBytes = 224
    /// One digest's share of a body in `attachments`: its 71 characters, quotes and a comma.
    static let attachmentBytes = 74

    /// Why the protocol cannot carry this mutation, by the server's own rules
    /// (`Mutation.rejectionReason`), or `nil` when it can.
    func problem() -> String? {
        var data: JSONObject?
        if op == .upsert {
            do {
                guard case .object(let object) = try JSONReader.parse((dataText ?? "{}").utf8) else {
                    return "data must be a JSON object"
                }
                data = object
            } catch {
                return "data is not valid JSON (\(error)); a REAL column holding Infinity or NaN has no JSON form"
            }
        }
        let mutation = Mutation(
            id: id,
            entity: entity,
            entityID: entityID,
            op: op,
            data: data,
            naturalKey: naturalKey,
            baseVersion: baseVersion,
            changedAt: changedAt,
            space: space,
            spaceIncarnation: spaceIncarnation,
            attachments: attachments
        )
        // Text of up to 32 KiB cannot exceed 256 KiB once the server encodes it (its numbers
        // may be a few digits longer than SQLite's); larger data is measured exactly.
        let textBytes = dataText?.utf8.count ?? 2
        return mutation.rejectionReason(encodedDataBytes: textBytes <= ProtocolLimits.maxDataBytes / 8 ? textBytes : nil)
    }

    /// A time of the outbox (`OutboxTable`) (seconds since 1970) in milliseconds, within what the protocol
    /// carries: a clock set before 1970 must not make a change unsendable.
    static func milliseconds(_ seconds: Double?) -> Int64? {
        guard let seconds, seconds.isFinite else { return nil }
        return Int64(min(max(0, (seconds * 1000).rounded()), Double(ProtocolLimits.maxMutationID)))
    }

    /// The data decoded, for a conflict policy to look at.
    func data() throws -> JSONObject? {
        guard op == .upsert else { return nil }
        guard let dataText else { return [:] }
        return try JSONDecoder().decode(JSONObject.self, from: Data(dataText.utf8))
    }

    /// This mutation as PROTOCOL.md's `Mutation` object.
    func write(to json: inout JSONTextWriter) {
        json.raw("{\"id\":")
        json.integer(id)
        json.raw(",\"entity\":")
        json.string(entity)
        json.raw(",\"entityID\":")
        json.string(entityID)
        if op == .upsert {
            json.raw(",\"op\":\"upsert\",\"data\":")
            if let dataText { json.fragment(dataText.utf8) } else { json.raw("{}") }
            if let naturalKey {
                json.raw(",\"naturalKey\":")
                json.string(naturalKey)
            }
            if let attachments {
                json.raw(",\"attachments\":[")
                for (index, digest) in attachments.enumerated() {
                    if index > 0 { json.raw(",") }
                    json.string(digest)
                }
                json.raw("]")
            }
        } else {
            json.raw(",\"op\":\"delete\"")
        }
        if let baseVersion {
            json.raw(",\"baseVersion\":")
            json.integer(baseVersion)
        }
        if let changedAt {
            json.raw(",\"changedAt\":")
            json.integer(changedAt)
        }
        if let space {
            json.raw(",\"space\":")
            json.string(space)
        }
        if let spaceIncarnation {
            json.raw(",\"spaceIncarnation\":")
            json.string(spaceIncarnation)
        }
        json.raw("}")
    }
}
