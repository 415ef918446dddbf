import FerryProtocol
import Foundation

/// Drains the outbox in batches until nothing is pending.
///
/// The server must see a client's batches in id order, so a batch is only sent once the
/// one before it has been answered. Everything else overlaps: while a batch is on the
/// wire the client applies the previous answer and reads the batch after it. A batch read
/// before an answer was applied is sent as read only if it touches none of that answer's
/// records (the answer moves their versions and may re-key them); otherwise it is read again.
/// Memory stays bounded by the batch size: at most three batches are held at once.
struct Uploader: Sendable {
    let outbox: Outbox
    let connection: SyncConnection
    let journal: Journal
    let status: StatusCenter
    let conflictPolicy: ConflictPolicy
    let maximumBatchSize: Int

    /// Where a drain stands: what it did, its batch size, and what its progress counted.
    private struct Progress {
        var summary = UploadSummary()
        var batchSize: Int
        /// The changes to send, grown by those queued during the drain.
        var total: Int
        /// The newest entry `total` counts.
        var counted: Int64
        var journaledTenth = -1
    }

    /// A batch's answer and the batch read after it, when both came while the batch before was applied.
    private typealias Answered = (response: TransportResponse, next: OutboxBatch?)

    /// Uploads everything pending; returns what happened.
    func drain() async throws -> UploadSummary {
        let commits = outbox.store.commits.count
        var progress = Progress(
            batchSize: maximumBatchSize,
            total: try await Outbox.counts(in: outbox.store).pending,
            counted: try await Outbox.newestEntry(in: outbox.store)
        )
        await status.update(asOfCommit: commits) { [total = progress.total] in
            if total > 0 { $0.phase = .uploading(done: 0, total: total) }  // "Synced 0 of 0" would say nothing true
            $0.pending = total
        }
        await journalProgress(done: 0, total: progress.total, journaledTenth: &progress.journaledTenth)
        var current = try await read(limit: progress.batchSize, into: &progress.summary)
        var ahead: Answered?
        while let batch = current {
            let (response, next) =
                if let ahead { ahead } else { try await sendReadingAhead(batch, limit: progress.batchSize, into: &progress.summary) }
            ahead = nil
            progress.summary.requests += 1
            switch PushVerdict(response, mutations: batch.mutations.count) {
            case .answered(let push):
                // Back to full size in a few steps after the batch was split.
                progress.batchSize = min(maximumBatchSize, progress.batchSize * 2)
                (current, ahead) = try await apply(push, to: batch, next: next, progress: &progress)
                try await report(&progress)
            case .malformed(let error):
                await returnToQueue(batch, next)
                throw FerryError.protocolViolation("push response is not valid: \(error)", underlying: error)
            case .halveForSlowLink(let message):
                try await release(batch, next)
                progress.batchSize = max(1, min(progress.batchSize, batch.entryCount) / 2)
                await journal.record(
                    JournalEvent(kind: .batchHalved, message: "push answered 408: \(message); batch size now \(progress.batchSize)")
                )
                current = try await read(limit: progress.batchSize, into: &progress.summary)
            case .waitForNextRun:
                await returnToQueue(batch, next)
                await journal.record(
                    JournalEvent(
                        kind: .wait,
                        message: "mutation \(batch.mutations[0].id) did not reach the server within its body timeout (408); "
                            + "it stays queued for the next run"
                    )
                )
                return progress.summary
            case .refusedWhole(let reason):
                if let next { try await outbox.release(next) }
                try await refused(batch, reason: reason, progress: &progress)
                current = try await read(limit: progress.batchSize, into: &progress.summary)
                try await report(&progress)
            case .failed(let message):
                await returnToQueue(batch, next)
                throw FerryError.protocolViolation(message)
            }
        }
        return progress.summary
    }

    /// Applies `push` to `batch`. When `next`, read while `batch` was on the wire, touches none of
    /// the answer's records, it is sent while the answer is applied and the batch after it is
    /// read; otherwise it goes back to the queue and is read again. Returns the batch to send
    /// next, and its answer if it came already.
    private func apply(
        _ push: PushResponse,
        to batch: OutboxBatch,
        next: OutboxBatch?,
        progress: inout Progress
    ) async throws -> (current: OutboxBatch?, ahead: Answered?) {
        guard let next, next.isIndependent(of: batch, results: push.results) else {
            if let next { try await outbox.release(next) }
            try await record(apply(push, to: batch), push: push, of: batch, into: &progress.summary)
            return (try await read(limit: progress.batchSize, into: &progress.summary), nil)
        }
        async let nextResponse = send(next)
        let limit = progress.batchSize
        let local = await attempt { (try await apply(push, to: batch), try await read(limit: limit, while: next)) }
        let answer: Result<TransportResponse, any Error>
        do { answer = .success(try await nextResponse) } catch { answer = .failure(error) }
        switch (local, answer) {
        case (.success(let (outcome, following)), .success(let response)):
            await record(outcome, push: push, of: batch, into: &progress.summary)
            await count(following, into: &progress.summary)
            return (next, (response, following.batch))
        case (.success(let (_, following)), .failure(let error)):
            await returnToQueue(following.batch)
            throw error
        case (.failure(let error), _):
            await returnToQueue(next)
            throw error
        }
    }

    /// A batch refused whole: split it until the mutation at fault is alone, and dead-letter
    /// that one with the server's reason: one record the server cannot take must not hold back
    /// the others.
    private func refused(_ batch: OutboxBatch, reason: String, progress: inout Progress) async throws {
        guard batch.mutations.count == 1 else {
            try await outbox.release(batch)
            progress.batchSize = max(1, min(progress.batchSize, batch.entryCount) / 2)
            await journal.record(JournalEvent(kind: .batchHalved, message: "\(reason); batch size now \(progress.batchSize)"))
            return
        }
        try await outbox.deadLetter(batch, reason: reason)
        let entries = batch.entries.values.reduce(0) { $0 + $1.count }
        progress.summary.deadLettered += entries
        await journal.record(
            JournalEvent(
                kind: .deadLettered,
                message: "mutation \(batch.mutations[0].id) refused: \(reason)",
                details: [.id: "\(batch.mutations[0].id)", .entries: "\(entries)"]
            )
        )
    }

    /// Puts batches not sent back to pending.
    private func release(_ batches: OutboxBatch?...) async throws {
        for case let batch? in batches { try await outbox.release(batch) }
    }

    /// Sends `batch` and reads the batch after it while waiting for the answer.
    private func sendReadingAhead(
        _ batch: OutboxBatch,
        limit: Int,
        into summary: inout UploadSummary
    ) async throws -> (response: TransportResponse, next: OutboxBatch?) {
        async let response = send(batch)
        let following = await attempt { try await read(limit: limit, while: batch) }
        let answer: Result<TransportResponse, any Error>
        do { answer = .success(try await response) } catch { answer = .failure(error) }
        switch (following, answer) {
        case (.success(let following), .success(let response)):
            await count(following, into: &summary)
            return (response, following.batch)
        case (.success(let following), .failure(let error)):
            await returnToQueue(following.batch)
            throw error
        case (.failure(let error), _):
            // The answer may have come: the entries go out again and are answered `duplicate`.
            await returnToQueue(batch)
            throw error
        }
    }

    /// What reading the next batch found: the batch with something to send, and what was
    /// settled locally on the way (entries that cancelled out, mutations dead-lettered unsent).
    private struct Reading: Sendable {
        var batch: OutboxBatch?
        var cancelledOut = 0
        var refused: [RefusedMutation] = []
    }

    /// Reads the next batch with something to send; `sent` is the batch on the wire meanwhile, if any.
    private func read(limit: Int, while sent: OutboxBatch? = nil) async throws -> Reading {
        var reading = Reading()
        let inFlight = sent?.records ?? []
        while let batch = try await outbox.nextBatch(limit: limit, inFlight: inFlight) {
            reading.refused += batch.refused
            guard batch.mutations.isEmpty else {
                reading.batch = batch  // its cancelled-out entries count when its answer is applied
                // Encoded now, while the batch before it is on the wire, not after its answer.
                reading.batch?.body = batch.requestBody()
                break
            }
            reading.cancelledOut += batch.unsent.count
        }
        return reading
    }

    private func read(limit: Int, into summary: inout UploadSummary) async throws -> OutboxBatch? {
        let reading = try await read(limit: limit)
        await count(reading, into: &summary)
        return reading.batch
    }

    /// Counts what a reading settled locally, and journals each mutation dead-lettered unsent.
    private func count(_ reading: Reading, into summary: inout UploadSummary) async {
        summary.acknowledged += reading.cancelledOut
        for refused in reading.refused {
            summary.deadLettered += refused.entries.count
            await journal.record(
                JournalEvent(
                    kind: .deadLettered,
                    message: "mutation \(refused.id) not sent: \(refused.reason)",
                    details: [.id: "\(refused.id)", .entries: "\(refused.entries.count)"]
                )
            )
        }
    }

    private func attempt<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
        do {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }

    /// Sends a batch; on failure its entries go back to pending.
    private func send(_ batch: OutboxBatch) async throws -> TransportResponse {
        do {
            return try await connection.send(
                TransportRequest(method: "POST", path: Endpoint.push, body: batch.body ?? batch.requestBody())
            )
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

    private func record(_ outcome: BatchOutcome, push: PushResponse, of batch: OutboxBatch, into summary: inout UploadSummary) async {
        summary.add(outcome)
        for resolved in outcome.resolved {
            let conflict = resolved.conflict
            await journal.record(
                JournalEvent(
                    kind: .conflict,
                    message:
                        "\(conflict.entity)/\(conflict.entityID) changed on the server (version \(conflict.server.map { "\($0.version)" } ?? "none")) "
                        + "since this device's change: resolved by \(resolved.outcome == "server" ? "taking the server's" : resolved.outcome == "local" ? "sending this device's again" : "sending a merge of both")",
                    details: [
                        .entity: conflict.entity, .entityID: conflict.entityID, .resolution: resolved.outcome,
                        .serverVersion: conflict.server.map { "\($0.version)" } ?? "",
                    ]
                )
            )
        }
        if let change = outcome.newClientID {
            await journal.record(
                JournalEvent(
                    kind: .clientRenewed,
                    message: "this store is now client \(change.new) in place of \(change.old): \(change.reason); every change the "
                        + "server has not acknowledged goes again under the new id",
                    details: [.old: change.old, .new: change.new]
                )
            )
        }
        guard outcome.deadLettered > 0 else { return }
        let resent: Set<String> = [ErrorCode.attachmentMissing.rawValue, PushResult.mutationIDReused]
        for (mutation, result) in zip(batch.mutations, push.results) where result.status == .rejected && !resent.contains(result.code ?? "") {
            await journal.record(
                JournalEvent(
                    kind: .deadLettered,
                    message: "mutation \(result.id) (\(mutation.entity)/\(mutation.entityID)) rejected"
                        + (result.code.map { " (\($0))" } ?? "") + ": \(result.error ?? "")",
                    details: [.id: "\(result.id)"]
                )
            )
            status.rejected(
                Rejection(
                    entity: mutation.entity,
                    entityID: mutation.entityID,
                    code: result.code,
                    message: result.error ?? "rejected",
                    details: result.details
                )
            )
        }
    }

    /// Puts batches back to pending even when the run is being cancelled (a sign-out), so
    /// nothing stays in flight. If even that fails, reopening the store recovers the entries.
    private func returnToQueue(_ batches: OutboxBatch?...) async {
        let outbox = self.outbox
        for case let batch? in batches {
            await Task { try? await outbox.release(batch) }.value
        }
    }

    /// Progress from what this drain has done: changes the app queues during the upload grow
    /// the total as they come (the upload sends them too), counted among the entries after
    /// the newest one `counted` (a range of ids, not the whole queue), and `pending` stays the
    /// queue's count, not an estimate a moment later corrects.
    private func report(_ progress: inout Progress) async throws {
        let done = progress.summary.acknowledged + progress.summary.deadLettered
        let commits = outbox.store.commits.count
        let (added, newest) = try await Outbox.queuedEntries(after: progress.counted, in: outbox.store)
        progress.counted = newest
        progress.total = max(progress.total + added, done)
        let phase = SyncStatus.Phase.uploading(done: done, total: progress.total)
        await status.update(asOfCommit: commits) { [total = progress.total] in
            $0.phase = phase
            $0.pending = total - done
        }
        await journalProgress(done: done, total: progress.total, journaledTenth: &progress.journaledTenth)
    }

    /// The journal gets the words the status shows at each tenth of the way, so a timeline
    /// shows what a progress bar showed without a line per batch.
    private func journalProgress(done: Int, total: Int, journaledTenth: inout Int) async {
        guard total > 0, done * 10 / total > journaledTenth else { return }
        journaledTenth = done * 10 / total
        await journal.record(.progress(.uploading(done: done, total: total)))
    }
}

/// Totals of one upload.
public struct UploadSummary: Sendable, Equatable {
    /// Pushes answered, one per batch sent; retries of a push are not counted.
    public var requests = 0
    /// Outbox entries the server acknowledged (or that cancelled out locally).
    public var acknowledged = 0
    /// Mutations the server merged into a record that already held their natural key.
    public var merged = 0
    /// Mutations whose record took the server's canonical id (merges, mostly).
    public var rekeyed = 0
    /// Outbox entries set aside as dead letters, by the server or before they were sent.
    public var deadLettered = 0
    /// Mutations the server answered `conflict`, each decided by the ``ConflictPolicy``.
    public var conflicts = 0

    /// Attachments whose bytes reached the server before the changes referencing them.
    public var attachmentsUploaded = 0

    /// Zero totals.
    public init() {}

    /// The totals of this and `other`, two drains of one run.
    mutating func add(_ other: UploadSummary) {
        requests += other.requests
        acknowledged += other.acknowledged
        merged += other.merged
        rekeyed += other.rekeyed
        deadLettered += other.deadLettered
        conflicts += other.conflicts
        attachmentsUploaded += other.attachmentsUploaded
    }

    mutating func add(_ outcome: BatchOutcome) {
        acknowledged += outcome.acknowledgedEntries
        merged += outcome.merged
        rekeyed += outcome.rekeyed
        deadLettered += outcome.deadLettered
        conflicts += outcome.conflicts
    }
}
