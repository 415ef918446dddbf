import FerryProtocol
import Foundation

/// The results of a client's two most recent pushes that processed anything, kept with the
/// client's `lastMutationID` so that a resent mutation is answered with the result it got
/// the first time (PROTOCOL.md, rule 1).
///
/// Two pushes are enough: a client sends a batch only once the one before it was answered,
/// and reads it only once the one before that was applied, so at most its last two batches
/// have answers it may not have applied (the one on the wire and the one answered just before).
/// Everything older is acknowledged and gone from its queue: it never resends it.
enum RecentResults {
    /// A push's processed results as stored: PROTOCOL.md's push response body. A conflict's
    /// `current` is left out; a replay reports the record as it is then.
    static func encode(_ results: [PushResult]) throws -> Data {
        let stored = results.map { result in
            var result = result
            result.current = nil
            return result
        }
        return Data(try PushResponse(lastMutationID: 0, results: stored).jsonBytes())
    }

    /// The stored results of the latest and the previous push, by mutation id.
    static func decode(latest: Data?, previous: Data?) throws -> [Int64: PushResult] {
        var results: [Int64: PushResult] = [:]
        for case let data? in [previous, latest] {
            do {
                for result in try PushResponse.decode(from: data).results { results[result.id] = result }
            } catch {
                throw StorageError.corrupt("a client's recent push results are not readable: \(error)")
            }
        }
        return results
    }
}
