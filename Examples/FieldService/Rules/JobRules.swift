// The field-service company's rules over its jobs, run by its server (Examples/FieldService/Server)
// on every write, and by its app (Examples/FieldService/App) before a write, for instant feedback.
import FerryRules

/// Only a dispatcher reassigns a job; a job is closed only with a photo; an amount is positive;
/// `updated_by` is the server's to set; and a job done sends its customer one email.
public struct JobRules: WriteRule {
    public let entities: Set<String> = ["jobs"]

    public init() {}

    /// The photo a job names, which closing it needs.
    public func reads(for write: ProposedWrite) -> [RecordRef] {
        (write.data?["photo"]?.stringValue).map { [RecordRef(entity: "photos", entityID: $0)] } ?? []
    }

    public func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
        guard var data = write.data else { return .accept }  // deleting a job
        if let amount = data["amount"], amount != .null, (amount.numberValue ?? 0) <= 0 {
            return .reject(code: "amount_not_positive", message: "The amount must be more than zero.", details: ["field": .string("amount")])
        }
        let dispatcher = write.isService || write.role == .admin
        if let current = write.current, !current.deleted, current.data?["assignee"] ?? .null != data["assignee"] ?? .null, !dispatcher {
            return .reject(
                code: "reassign_needs_dispatcher",
                message: "Only a dispatcher may reassign a job.",
                details: ["field": .string("assignee")]
            )
        }
        if data["status"] == .string("done") {
            let photo = (data["photo"]?.stringValue).flatMap { reads.data(of: RecordRef(entity: "photos", entityID: $0)) }
            guard photo != nil else {
                return .reject(code: "job_closed_without_photo", message: "Take a photo of the finished job before closing it.")
            }
        }
        data["updated_by"] = .string(write.user)  // never trusted from a phone
        return .rewrite(data)
    }

    /// One email to the customer when a job becomes done.
    public func effects(of write: ProposedWrite) -> [SideEffect] {
        guard write.data?["status"] == .string("done"), write.current?.data?["status"] != .string("done") else { return [] }
        // Named by the team's job (ids are a team's own): one email per job, whichever write (a
        // restored phone's resend, a second dispatcher) asks for it.
        return [
            SideEffect(
                kind: "email.job_done",
                payload: ["job": .string(write.entityID), "title": write.data?["title"] ?? .null],
                key: "\(write.space ?? write.user)/\(write.entityID)"
            )
        ]
    }
}
