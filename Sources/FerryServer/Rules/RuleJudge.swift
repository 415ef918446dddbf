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
        /// No rule objects: the write goes on as proposed (as judged).
        case accept(ProposedWrite)
        /// The write goes on with the rules' data, which the answer carries back.
        case rewrite(IncomingMutation, ProposedWrite)
        /// Refused: this is its result.
        case refuse(PushResult)
    }

    /// Whether a rule judges writes of `entity`.
    func judges(_ entity: String) -> Bool { !rules.rules(for: entity).isEmpty }

    /// The records the rules of `mutation`'s entity read to judge it, for the batch's lookups.
    func reads(for mutation: Mutation) -> [RecordRef] {
        let judging = rules.rules(for: mutation.entity)
        guard !judging.isEmpty else { return [] }
        let write = proposal(mutation, current: nil)
        return judging.flatMap { $0.reads(for: write) }
    }

    /// `incoming` through its entity's rules in order, each seeing the one before's rewrite;
    /// `current` is its record as the batch leaves it so far, `read` any other. Throws
    /// ``RuleUnavailable`` when a rule says "not now".
    func judge(_ incoming: IncomingMutation, current: RecordState?, read: (RecordRef) -> RecordState?) throws(RuleUnavailable) -> Verdict {
        let judging = rules.rules(for: incoming.mutation.entity)
        let proposed = proposal(incoming.mutation, current: current)
        guard !judging.isEmpty else { return .accept(proposed) }
        var write = proposed
        for rule in judging {
            var visible: [RecordRef: RecordState] = [:]
            for record in rule.reads(for: write) { visible[record] = read(record) }
            let decision: RuleDecision
            do {
                decision = try rule.decide(write, reads: RuleReads(visible))
            } catch let unavailable as RuleUnavailable {
                throw unavailable
            } catch {
                rules.logger.error(
                    "a rule failed; the write is refused with rule_failed",
                    metadata: ["rule": "\(type(of: rule))", "entity": "\(write.entity)", "entityID": "\(write.entityID)", "error": "\(error)"]
                )
                return .refuse(refusal(write, "the server's rule for \(write.entity) failed on this change", code: ErrorCode.ruleFailed.rawValue))
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
                return .refuse(refused)
            }
        }
        guard let data = write.data, write.data != proposed.data else { return .accept(write) }
        var mutation = incoming.mutation
        mutation.data = data
        let rewritten = IncomingMutation(mutation, attachments: true)
        if let reason = rewritten.rejection {
            return .refuse(refusal(write, "the server's rule made data it cannot store: \(reason)", code: ErrorCode.ruleFailed.rawValue))
        }
        return .rewrite(rewritten, write)
    }

    /// The effects the rules of an applied write ask for, each with the key that names it for
    /// good: the writer, its client, the mutation and the effect's place among the write's.
    func effects(of write: ProposedWrite) -> [PendingEffect] {
        rules.rules(for: write.entity).flatMap { $0.effects(of: write) }.enumerated().map { index, effect in
            PendingEffect(key: "\(caller.userID)/\(clientID)/\(write.mutationID)/\(index)", effect: effect)
        }
    }

    private func proposal(_ mutation: Mutation, current: RecordState?) -> ProposedWrite {
        ProposedWrite(
            entity: mutation.entity,
            entityID: mutation.entityID,
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
