import FerryProtocol

/// One of the app's rules over writes: it validates, authorises, derives or refuses each write
/// of its entities, on the server, inside the push's transaction (PROTOCOL.md, "Rules").
///
/// A rule is a value with no dependency on the server: it sees what is proposed
/// (``ProposedWrite``), declares the other records it must read (``reads(for:)``, read in the
/// same transaction, so no write can slip between its reading and the push's writing), and
/// decides (``RuleDecision``). It may throw ``RuleUnavailable`` to say "not now" (a service it
/// needs is down): the push is answered `503` and nothing of it is applied. Any other error it
/// throws refuses that one write with `rule_failed`; the batch goes on.
///
/// ```swift
/// struct JobRules: WriteRule {
///     let entities: Set<String> = ["jobs"]
///     func reads(for write: ProposedWrite) -> [RecordRef] {
///         (write.data?["photo"]?.stringValue).map { [RecordRef(entity: "photos", entityID: $0)] } ?? []
///     }
///     func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
///         guard write.data?["amount"]?.numberValue ?? 1 > 0 else {
///             return .reject(code: "amount_not_positive", message: "The amount must be more than zero.")
///         }
///         var data = write.data ?? [:]
///         data["updated_by"] = .string(write.user)  // set by the server, never trusted from a phone
///         return .rewrite(data)
///     }
/// }
/// ```
public protocol WriteRule: Sendable {
    /// The entities whose writes the rule judges.
    var entities: Set<String> { get }

    /// The records the rule reads to judge `write`, beyond the record written (which it sees as
    /// ``ProposedWrite/current``): of the write's own space, or of the writer's own records for a
    /// write outside spaces. Asked of the write as the client proposed it (its data as sent,
    /// `current` not yet known), before the push reads anything. None by default.
    func reads(for write: ProposedWrite) -> [RecordRef]

    /// The rule's decision on `write`, given each record of ``reads(for:)`` as the server holds
    /// it before the push.
    func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision

    /// What the app does outside the database once `write` is applied (it holds the rules'
    /// rewrite, and `current` the record before it): asked of a write every rule accepted, and
    /// kept only if the push applies it. None by default.
    func effects(of write: ProposedWrite) -> [SideEffect]
}

extension WriteRule {
    /// Reads nothing beyond the record written.
    public func reads(for write: ProposedWrite) -> [RecordRef] { [] }

    /// Asks for nothing outside the database.
    public func effects(of write: ProposedWrite) -> [SideEffect] { [] }
}
