import FerryProtocol
import Foundation

/// Drains the outbox in batches until nothing is pending.
///
/// Memory stays bounded by the batch size: at most two batches are held, the one being
/// applied and the next. The server must see a client's batches in id order, so a batch
/// is only sent once the previous one has been answered; but its answer is applied while
/// the next batch is on the wire, unless the two touch the same records (the next batch
/// was read before that answer re-keyed records or moved their versions).
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
        var current = try await takeBatch(limit: batchSize, summary: &summary, total: total)
        // The answer to `current`, when it was sent while the batch before it was applied.
        var answered: TransportResponse?
        while let batch = current {
            let response: TransportResponse
            if let answered {
                response = answered
            } else {
                response = try await send(batch)
            }
            answered = nil
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
                let next: OutboxBatch?
                do {
                    next = try await takeBatch(limit: batchSize, summary: &summary, total: total)
                } catch {
                    await returnToQueue(batch)
                    throw error
                }
                if let next, next.isIndependent(of: batch, results: push.results) {
                    async let nextResponse = send(next)
                    let outcome: BatchOutcome
                    do {
                        outcome = try await apply(push, to: batch)
                    } catch {
                        _ = try? await nextResponse
                        await returnToQueue(next)
                        throw error
                    }
                    await record(outcome, push: push, into: &summary)
                    answered = try await nextResponse
                    current = next
                } else {
                    if let next { try await outbox.release(next) }
                    await record(try await apply(push, to: batch), push: push, into: &summary)
                    // Taken again after applying: the answer may have queued entries (a conflict
                    // resolved by keeping the local record) and moved versions of `next`'s records.
                    current = try await takeBatch(limit: batchSize, summary: &summary, total: total)
                }
                await report(summary, total: total)
            case 413 where batchSize > 1:
                try await outbox.release(batch)
                batchSize = max(1, batchSize / 2)
                await journal.record(JournalEvent(kind: "batch.halved", message: "server answered 413; batch size now \(batchSize)"))
                current = try await takeBatch(limit: batchSize, summary: &summary, total: total)
            default:
                await returnToQueue(batch)
                throw FerryError.protocolViolation("push answered \(response.status): \(SyncConnection.message(in: response))")
            }
        }
        return summary
    }

    /// The next batch with something to send; batches whose entries all cancelled out
    /// locally are counted as done on the way.
    private func takeBatch(limit: Int, summary: inout UploadSummary, total: Int) async throws -> OutboxBatch? {
        while let batch = try await outbox.nextBatch(limit: limit) {
            guard batch.mutations.isEmpty else { return batch }
            summary.acknowledged += batch.unsent.count
            await report(summary, total: total)
        }
        return nil
    }

    /// Sends a batch; on failure its entries go back to pending.
    private func send(_ batch: OutboxBatch) async throws -> TransportResponse {
        do {
            return try await connection.send(TransportRequest(method: "POST", path: "/v1/push", body: batch.requestBody(clientID: clientID)))
        } catch {
            await returnToQueue(batch)
            throw error
        }
    }

    /// Applies an answer; on failure the batch's entries go back to pending.
    private func apply(_ push: PushResponse, to batch: OutboxBatch) async throws -> BatchOutcome {
        do {
            return try await outbox.apply(push, to: batch, policy: conflictPolicy)
        } catch {
            await returnToQueue(batch)
            throw error
        }
    }

    private func record(_ outcome: BatchOutcome, push: PushResponse, into summary: inout UploadSummary) async {
        summary.add(outcome)
        guard outcome.deadLettered > 0 else { return }
        for result in push.results where result.status == .rejected {
            await journal.record(JournalEvent(kind: "deadLettered", message: "mutation \(result.id) rejected: \(result.error ?? "")", details: ["id": "\(result.id)"]))
        }
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
