import FerryProtocol

/// What one push answer means for the queue and the app's rows, decided from the batch, the
/// answer and the client id alone: no database, so its rules are tested as values
/// (`AnswerPlanTests`). `Outbox.apply` carries it out, step by step, in the batch's order.
struct AnswerPlan: Equatable {
    /// One mutation of the batch and what its result asks for.
    struct Step: Equatable {
        var mutation: OutgoingMutation
        /// The outbox entries it stands for.
        var entries: [Int64]
        /// The record's id on the server when the answer names another one (a merge, a
        /// duplicate of a merged record, a conflict judged against the holder of its natural
        /// key): the local row and its queued changes take it first.
        var canonical: String?
        var decision: Decision

        /// The record as the server names it.
        var serverRecord: RecordRef { RecordRef(entity: mutation.entity, entityID: canonical ?? mutation.entityID) }
    }

    enum Decision: Equatable {
        /// Another holder's mutation under this client id, not an acknowledgement of ours: its
        /// entries go back to the queue, to be sent under a new client id.
        case resend
        /// Done with. `written` when the server applied or merged it (not a duplicate); the
        /// record is at `version` on the server. A duplicate carries the record as it is now
        /// (`current`), which the row takes.
        case finish(written: Bool, merged: Bool, version: Int64?, current: RecordState?)
        /// Refused: a dead letter saying `reason`. The row takes `current` (the record as the
        /// user may still read it), or leaves when `code` shows a space the user cannot read.
        case deadLetter(reason: String, code: String?, current: RecordState?)
        /// A conflict, ended by the policy against `current`: `judged` is the mutation under the
        /// id it was judged against. `absorbsOwn` when that is another record's (its natural key's
        /// holder) and the server also has the mutation's own record, which then goes.
        case resolve(judged: OutgoingMutation, current: RecordState?, absorbsOwn: Bool)
        /// Refused for an attachment the server does not hold for this user (`attachment_missing`):
        /// `digests` wait for upload again, and the change is queued again behind them; never a
        /// dead letter while the store holds their files.
        case uploadFirst(digests: [String])
    }

    var steps: [Step]
    /// Why the answer shows that another store holds the batch's client id; `nil` when it does not.
    var anotherHolder: String?
    /// Whether the batch went under the client id the store still has: an answer to one sent
    /// under an id it gave up proves nothing about holders, and its writes are not named as its own.
    var underCurrentID: Bool

    /// `response` must answer `batch` one to one (`Outbox.apply` checks it first).
    init(_ response: PushResponse, to batch: OutboxBatch, clientID: String, highestSent: Int64) {
        underCurrentID = batch.clientID.hasSameBytes(as: clientID)
        anotherHolder =
            underCurrentID && response.lastMutationID > highestSent
            ? "the server has processed mutation \(response.lastMutationID), and this store never sent one above \(highestSent)"
            : nil
        var evidence = anotherHolder
        for (mutation, result) in zip(batch.mutations, response.results) where underCurrentID && evidence == nil {
            evidence = Outbox.anotherHolderEvidence(mutation, result, firstSent: batch.firstSent.contains(mutation.id))
        }
        anotherHolder = evidence
        steps = zip(batch.mutations, response.results).map { mutation, result in
            Self.step(
                mutation,
                result,
                entries: batch.entries[mutation.id] ?? [],
                firstSent: batch.firstSent.contains(mutation.id),
                anotherHolder: evidence != nil
            )
        }
    }

    private static func step(_ mutation: OutgoingMutation, _ result: PushResult, entries: [Int64], firstSent: Bool, anotherHolder: Bool) -> Step {
        let reused = result.status == .rejected && result.code == PushResult.mutationIDReused
        if reused || (result.status == .duplicate && (firstSent || anotherHolder)) {
            return Step(mutation: mutation, entries: entries, decision: .resend)
        }
        let canonical = result.status == .rejected ? nil : result.entityID.flatMap { $0.hasSameBytes(as: mutation.entityID) ? nil : $0 }
        let decision: Decision
        switch result.status {
        case .applied, .merged, .duplicate:
            decision = .finish(
                written: result.status != .duplicate,
                merged: result.status == .merged,
                version: result.version,
                // A duplicate's record as it is now; an applied write the app's rule rewrote, as stored.
                current: result.current
            )
        case .rejected where result.code == ErrorCode.attachmentMissing.rawValue:
            decision = .uploadFirst(digests: mutation.attachments ?? [])
        case .rejected:
            // `current` is the record `entityID` names: the row takes it only when that is this
            // record (a later server's status read as a rejection may name another).
            let own = result.entityID.map { $0.hasSameBytes(as: mutation.entityID) } ?? true
            decision = .deadLetter(reason: result.error ?? "rejected", code: result.code, current: own ? result.current : nil)
        case .conflict:
            var judged = mutation
            if let canonical { judged.entityID = canonical }
            decision = .resolve(judged: judged, current: result.current, absorbsOwn: canonical != nil && (mutation.baseVersion ?? 0) > 0)
        }
        return Step(mutation: mutation, entries: entries, canonical: canonical, decision: decision)
    }

    /// The mutations this answer says wrote a record, in batch order.
    var written: [Int64] {
        steps.compactMap { if case .finish(written: true, _, _, _) = $0.decision { $0.mutation.id } else { nil } }
    }

    /// Per record, as the server names it, the last of its mutations the answer says was written.
    var lastWritten: [RecordRef: Int64] {
        var last: [RecordRef: Int64] = [:]
        for step in steps {
            guard case .finish(written: true, _, _, _) = step.decision else { continue }
            last[step.serverRecord] = max(last[step.serverRecord] ?? 0, step.mutation.id)
        }
        return last
    }

    /// The counts of the outcome, before anything is carried out; `unsent` entries (folded or
    /// cancelled out before sending) count as acknowledged.
    func outcome(unsent: Int) -> BatchOutcome {
        var outcome = BatchOutcome(acknowledgedEntries: unsent)
        for step in steps {
            if step.decision != .resend, step.canonical != nil { outcome.rekeyed += 1 }
            switch step.decision {
            case .resend: break
            case .finish(_, let merged, _, _):
                outcome.acknowledgedEntries += step.entries.count
                if merged { outcome.merged += 1 }
            case .deadLetter:
                outcome.deadLettered += step.entries.count
            case .uploadFirst:
                outcome.waitingForAttachments += step.entries.count
            case .resolve:
                outcome.acknowledgedEntries += step.entries.count
                outcome.conflicts += 1
            }
        }
        return outcome
    }
}
