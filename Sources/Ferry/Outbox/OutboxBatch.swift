import FerryProtocol
import Foundation
import GRDB

/// What `Outbox.nextBatch` took.
struct OutboxBatch: Sendable {
    /// Entries read from the queue for this batch.
    var entryCount: Int
    /// The client id it is sent under.
    var clientID: String
    var mutations: [OutgoingMutation] = []
    /// The mutations whose entries were never sent before: an answer that calls one of them
    /// already processed came from another holder of the client id.
    var firstSent: Set<Int64> = []
    /// The outbox entries each mutation stands for (itself and the edits coalesced into it).
    var entries: [Int64: [Int64]] = [:]
    /// Entries removed without being sent: they cancelled out, or were folded into the
    /// mutation that carries their record's latest state.
    var unsent: [Int64] = []
    /// Mutations the protocol cannot carry, dead-lettered instead of sent.
    var refused: [RefusedMutation] = []
    /// `requestBody`, when the uploader encoded it ahead of sending.
    var body: Data?

    /// Whether this batch, read before `previous`'s answer was applied, can be sent as it is:
    /// it must not touch a record of `previous`, under its local id or the canonical one
    /// the server answered with, whose version or identity that answer may change.
    func isIndependent(of previous: OutboxBatch, results: [PushResult]) -> Bool {
        var touched = previous.records
        for (mutation, result) in zip(previous.mutations, results) {
            if let canonical = result.entityID { touched.insert(RecordRef(entity: mutation.entity, entityID: canonical)) }
        }
        return !mutations.contains { touched.contains(RecordRef(entity: $0.entity, entityID: $0.entityID)) }
    }

    /// The records this batch sends changes of.
    var records: Set<RecordRef> {
        Set(mutations.map { RecordRef(entity: $0.entity, entityID: $0.entityID) })
    }

    /// The `PushRequest` body of PROTOCOL.md for this batch.
    func requestBody() -> Data {
        var json = JSONTextWriter(capacity: 64 + mutations.reduce(0) { $0 + 128 + ($1.dataText?.utf8.count ?? 0) })
        json.raw("{\"clientID\":")
        json.string(clientID)
        json.raw(",\"mutations\":[")
        for (index, mutation) in mutations.enumerated() {
            if index > 0 { json.raw(",") }
            mutation.write(to: &json)
        }
        json.raw("]}")
        return Data(json.bytes)
    }
}

/// A mutation dead-lettered without being sent, and why.
struct RefusedMutation: Sendable {
    var id: Int64
    var entries: [Int64]
    var reason: String
}
