import FerryProtocol
import Foundation

/// The results of a client's two most recent pushes that processed new mutations, kept with
/// the client's `lastMutationID` so that a resent mutation is answered with the result it
/// got the first time (PROTOCOL.md, rule 1).
///
/// A push keeps all its results, resent ones included: a mutation the client keeps resending
/// because the answers keep getting lost stays in the newest push. Two pushes are enough for
/// a client that sends a batch only once the one before it was answered, and reads it only
/// once the one before that was applied: its unapplied answers are those of the batch on the
/// wire and the one answered just before.
enum RecentResults {
    /// A kept result and the mutation it answered, to tell a resend from another change that
    /// reuses the id (a store copied to a second device, or restored from a backup).
    struct Kept: Sendable {
        var result: PushResult
        var entity: String
        var entityID: String
        var op: MutationOp

        func answers(_ mutation: Mutation) -> Bool {
            op == mutation.op && entity.hasSameBytes(as: mutation.entity) && entityID.hasSameBytes(as: mutation.entityID)
        }
    }

    /// A push's results as stored: PROTOCOL.md's push response body, plus the mutation each
    /// answered. A conflict's `current` is left out; a replay reports the record as it is then.
    static func encode(_ results: [PushResult], of mutations: [IncomingMutation]) throws -> Data {
        let stored = results.map { result in
            var result = result
            result.current = nil
            return result
        }
        var json = JSONTextWriter(capacity: 64 + results.count * 160)
        json.fragment(try PushResponse(lastMutationID: 0, results: stored).jsonBytes().dropLast())
        json.raw(",\"mutations\":[")
        for (index, incoming) in mutations.enumerated() {
            if index > 0 { json.raw(",") }
            json.raw("[")
            json.string(incoming.mutation.entity)
            json.raw(",")
            json.string(incoming.mutation.entityID)
            json.raw(",")
            json.string(incoming.mutation.op.rawValue)
            json.raw("]")
        }
        json.raw("]}")
        return Data(json.bytes)
    }

    /// The stored results of the latest and the previous push, by mutation id.
    static func decode(latest: Data?, previous: Data?) throws -> [Int64: Kept] {
        var kept: [Int64: Kept] = [:]
        for case let data? in [previous, latest] {
            do {
                let results = try PushResponse.decode(from: data).results
                guard case .object(let fields) = try JSONReader.parse(data), case .array(let mutations)? = fields["mutations"],
                    mutations.count == results.count
                else { throw StorageError.corrupt("a client's recent push results have no mutation for each result") }
                for (result, mutation) in zip(results, mutations) {
                    guard case .array(let parts) = mutation, parts.count == 3, case .string(let entity) = parts[0],
                        case .string(let entityID) = parts[1], case .string(let op) = parts[2], let op = MutationOp(rawValue: op)
                    else { throw StorageError.corrupt("a client's recent push results name a mutation that is not [entity, entityID, op]") }
                    kept[result.id] = Kept(result: result, entity: entity, entityID: entityID, op: op)
                }
            } catch let error as StorageError {
                throw error
            } catch {
                throw StorageError.corrupt("a client's recent push results are not readable: \(error)")
            }
        }
        return kept
    }
}
