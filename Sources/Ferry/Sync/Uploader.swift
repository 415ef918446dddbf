import FerryProtocol
import Foundation

/// Drains the outbox in batches until nothing is pending.
///
/// Memory stays bounded by the batch size: each batch is read, sent and
/// applied before the next is read, however long the queue.
struct Uploader: Sendable {
    let outbox: Outbox
    let connection: SyncConnection
    let journal: Journal
    let status: StatusCenter
    let clientID: String
    let conflictPolicy: ConflictPolicy
    let maximumBatchSize: Int

    /// Uploads everything pending; returns what happened.
    func drain() async throws -> UploadSummary {
        var summary = UploadSummary()
        var batchSize = maximumBatchSize
        let total = try await outbox.counts().pending
        await status.update { $0.phase = .uploading(done: 0, total: total); $0.pending = total }
        while let batch = try await outbox.nextBatch(limit: batchSize) {
            if batch.mutations.isEmpty {
                summary.acknowledged += batch.unsent.count
                await report(summary, total: total)
                continue
            }
            let response: TransportResponse
            do {
                response = try await connection.send(TransportRequest(method: "POST", path: "/v1/push", body: batch.requestBody(clientID: clientID)))
            } catch {
                await returnToQueue(batch)
                throw error
            }
            summary.requests += 1
            switch response.status {
            case 200:
                let push: PushResponse
                do {
                    push = try JSONDecoder().decode(PushResponse.self, from: response.body)
                } catch {
                    await returnToQueue(batch)
                    throw FerryError.protocolViolation("push response is not valid: \(error)")
                }
                let outcome: BatchOutcome
                do {
                    outcome = try await outbox.apply(push, to: batch, policy: conflictPolicy)
                } catch {
                    await returnToQueue(batch)
                    throw error
                }
                summary.add(outcome)
                if outcome.deadLettered > 0 {
                    for result in push.results where result.status == .rejected {
                        await journal.record(JournalEvent(kind: "deadLettered", message: "mutation \(result.id) rejected: \(result.error ?? "")", details: ["id": "\(result.id)"]))
                    }
                }
                await report(summary, total: total)
            case 413 where batchSize > 1:
                try await outbox.release(batch)
                batchSize = max(1, batchSize / 2)
                await journal.record(JournalEvent(kind: "batch.halved", message: "server answered 413; batch size now \(batchSize)"))
            default:
                await returnToQueue(batch)
                throw FerryError.protocolViolation("push answered \(response.status): \(SyncConnection.message(in: response))")
            }
        }
        return summary
    }

    /// Puts the batch back to pending even when the run is being cancelled (a sign-out), so
    /// nothing stays in flight. If even that fails, reopening the store recovers the entries.
    private func returnToQueue(_ batch: OutboxBatch) async {
        let outbox = self.outbox
        await Task { try? await outbox.release(batch) }.value
    }

    /// Progress from what this drain has done, without counting the queue again.
    private func report(_ summary: UploadSummary, total: Int) async {
        let done = summary.acknowledged + summary.deadLettered
        let total = max(total, done)
        await status.update {
            $0.phase = .uploading(done: done, total: total)
            $0.pending = total - done
        }
    }
}

/// Totals of one upload.
public struct UploadSummary: Sendable, Equatable {
    public var requests = 0
    /// Outbox entries the server acknowledged (or that cancelled out locally).
    public var acknowledged = 0
    public var merged = 0
    public var rekeyed = 0
    public var deadLettered = 0
    public var conflicts = 0

    public init() {}

    mutating func add(_ outcome: BatchOutcome) {
        acknowledged += outcome.acknowledgedEntries
        merged += outcome.merged
        rekeyed += outcome.rekeyed
        deadLettered += outcome.deadLettered
        conflicts += outcome.conflicts
    }
}
