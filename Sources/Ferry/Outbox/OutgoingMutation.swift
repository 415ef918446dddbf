import FerryProtocol
import Foundation

/// A mutation as a batch carries it: an upsert's data is still the JSON text stored with its
/// outbox entry, spliced into the request as is (it was written by SQLite's `json_object`
/// or `json`, or by Ferry's encoder, so it is valid JSON).
struct OutgoingMutation: Sendable {
    var id: Int64
    var entity: String
    var entityID: String
    var op: MutationOp
    /// An upsert's data as stored; `nil` for a delete.
    var dataText: String?
    var naturalKey: String?
    var baseVersion: Int64?

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
        guard op == .upsert else {
            json.raw(",\"op\":\"delete\"}")
            return
        }
        json.raw(",\"op\":\"upsert\",\"data\":")
        if let dataText { json.fragment(dataText.utf8) } else { json.raw("{}") }
        if let naturalKey {
            json.raw(",\"naturalKey\":")
            json.string(naturalKey)
        }
        if let baseVersion {
            json.raw(",\"baseVersion\":")
            json.integer(baseVersion)
        }
        json.raw("}")
    }
}
