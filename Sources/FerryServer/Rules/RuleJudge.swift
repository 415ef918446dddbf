import FerryProtocol
import FerryRules

/// The app's rules (``ServerRules``) over one push's new writes, as `BatchPlanner` asks them:
/// each write in request order, seeing the records as the batch has left them so far (an
/// earlier write of the same batch included, a conflict's not), inside the push's transaction.
/// Values in, a verdict out: both engines obey it alike.
struct RuleJudge: Sendable {
    let rules: ServerRules
    let caller: Caller
    let clientID: String
    /// The caller's role in each space the push writes to, by space id.
    let roles: [String: SpaceRole]

    /// What the rules make of a write.
    enum Verdict {
        /// No rule objects: the write goes on as proposed, with the effects its rules ask for
        /// if it is applied.
        case accept([PendingEffect])
        /// The write goes on with the rules' data, which the answer carries back.
        case rewrite(IncomingMutation, [PendingEffect])
        /// Refused: this is its result.
        case refuse(PushResult)
    }

    /// Whether a rule judges writes of `entity`.
    func judges(_ entity: String) -> Bool { !rules.rules(for: entity).isEmpty }

    /// The records the rules of `mutation`'s entity read to judge it: what each rule's
    /// `reads(for:)` asks of the write as proposed (its data as sent, no `current`), so that the
    /// batch's lookups load exactly what the judgement reads.
    func reads(for mutation: Mutation) -> [RecordRef] {
        let write = proposal(mutation, entityID: mutation.entityID, current: nil)
        return rules.rules(for: mutation.entity).flatMap { $0.reads(for: write) }
    }

    /// `incoming` through its entity's rules in order, each seeing the one before's rewrite;
    /// `target` is the record it writes (its own, or its natural key's holder), `current` that
    /// record as the batch leaves it so far, `read` any other. Throws ``RuleUnavailable`` when a
    /// rule says "not now".
    func judge(
        _ incoming: IncomingMutation,
        target: RecordRef,
        current: RecordState?,
        read: (RecordRef) -> RecordState?
    ) throws(RuleUnavailable) -> Verdict {
        let judging = rules.rules(for: incoming.mutation.entity)
        let proposed = proposal(incoming.mutation, entityID: target.entityID, current: current)
        var visible: [RecordRef: RecordState] = [:]
        for record in reads(for: incoming.mutation) { visible[record] = read(record) }
        let reads = RuleReads(visible)
        var write = proposed
        for rule in judging {
            let decision: RuleDecision
            do {
                decision = try rule.decide(write, reads: reads)
            } catch let unavailable as RuleUnavailable {
                throw unavailable
            } catch {
                return .refuse(failure(of: rule, write, "threw \(error)"))
            }
            switch decision {
            case .accept:
                continue
            case .rewrite(let data):
                guard write.op == .upsert else {
                    return .refuse(refusal(write, "the server's rule rewrote a delete, which it may not", code: ErrorCode.ruleFailed.rawValue))
                }
                write.data = data
            case .reject(let rejection):
                guard let code = rejection.wireCode else {
                    rules.logger.error(
                        "a rule refused a write with a code that is not 1 to 64 of a-z 0-9 _; the write is refused with rule_failed",
                        metadata: ["rule": "\(type(of: rule))", "code": "\(rejection.code.prefix(80))"]
                    )
                    return .refuse(refusal(write, rejection.message, code: ErrorCode.ruleFailed.rawValue))
                }
                var refused = refusal(write, rejection.message, code: code)
                refused.details = rejection.details
                guard rejection.details.map(Self.isFinite) ?? true else {
                    return .refuse(failure(of: rule, write, "gave details with a number JSON cannot hold"))
                }
                return .refuse(refused)
            }
        }
        // The effects the write asks for if it is applied, asked of the write as judged.
        var effects: [PendingEffect] = []
        for rule in judging {
            for effect in rule.effects(of: write) {
                if let key = effect.key, !Self.isEffectKey(key) {
                    return .refuse(
                        failure(of: rule, write, "named an effect with a key that is empty, longer than 200 bytes or holds a control character")
                    )
                }
                guard let pending = PendingEffect(key: effectKey(write, effect, effects.count), effect: effect) else {
                    return .refuse(failure(of: rule, write, "asked for an effect whose payload JSON cannot hold"))
                }
                effects.append(pending)
            }
        }
        guard let data = write.data, write.data != proposed.data else { return .accept(effects) }
        var mutation = incoming.mutation
        mutation.data = data
        let rewritten = IncomingMutation(mutation, attachments: true)
        if let reason = rewritten.rejection {
            return .refuse(refusal(write, "the server's rule made data it cannot store: \(reason)", code: ErrorCode.ruleFailed.rawValue))
        }
        return .rewrite(rewritten, effects)
    }

    /// The key that names an effect for good: the app's, under its kind, when it gave one;
    /// otherwise the writer, its client, the mutation, the effect's place among the write's, and
    /// when it was asked (a store restored from an old backup may send a mutation id again once
    /// the server has forgotten its client).
    private func effectKey(_ write: ProposedWrite, _ effect: SideEffect, _ index: Int) -> String {
        // The kind's length first: no kind and key can spell another's.
        if let key = effect.key { return "app/\(effect.kind.utf8.count):\(effect.kind)/\(key)" }
        return "\(caller.userID)/\(clientID)/\(write.mutationID)/\(index)@\(serverMilliseconds())"
    }

    /// A refusal with `rule_failed` for a rule whose answer cannot be kept, logged.
    private func failure(of rule: any WriteRule, _ write: ProposedWrite, _ what: String) -> PushResult {
        rules.logger.error(
            "a rule \(what); the write is refused with rule_failed",
            metadata: ["rule": "\(type(of: rule))", "entity": "\(write.entity)", "entityID": "\(write.entityID)"]
        )
        return refusal(write, "the server's rule for \(write.entity) failed on this change", code: ErrorCode.ruleFailed.rawValue)
    }

    /// Whether the app's key for an effect is one every service takes as an idempotency key:
    /// 1 to 200 bytes of UTF-8, no control characters.
    private static func isEffectKey(_ key: String) -> Bool {
        (1...200).contains(key.utf8.count) && !key.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// Whether every number in `object` is one JSON can hold.
    private static func isFinite(_ object: JSONObject) -> Bool {
        var json = JSONTextWriter(capacity: 64)
        return json.value(.object(object))
    }

    private func proposal(_ mutation: Mutation, entityID: String, current: RecordState?) -> ProposedWrite {
        ProposedWrite(
            entity: mutation.entity,
            entityID: entityID,
            op: mutation.op,
            data: mutation.op == .delete ? nil : (mutation.data ?? [:]),
            current: current,
            space: mutation.space,
            role: caller.isService ? nil : mutation.space.flatMap { roles[$0] },
            user: caller.userID,
            isService: caller.isService,
            clientID: clientID,
            mutationID: mutation.id
        )
    }

    /// A refusal of `write`, with its record as the server holds it (none: `absent`), which the
    /// client takes back.
    private func refusal(_ write: ProposedWrite, _ message: String, code: String) -> PushResult {
        PushResult(
            id: write.mutationID,
            status: .rejected,
            entityID: nil,
            version: nil,
            current: write.current ?? .absent,
            error: message,
            code: code
        )
    }
}
