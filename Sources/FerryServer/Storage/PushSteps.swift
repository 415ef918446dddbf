import FerryProtocol
import Foundation

/// A push, step by step, as both storage engines take it inside the push's transaction. Every
/// rule of a push lives here (or in the `SpacedBatch` and `BatchPlanner` it calls), so that each
/// engine only does the reading and writing between the steps, and a rule written once is obeyed
/// by both:
///
/// 1. under the user's change lock, read the client (`client(lastMutationID:pushes:)`), count
///    the user's clients if it has no row (`admit(existingClients:)`), and read its kept results
///    for a resend (`needsKeptResults`, `replay(_:)`);
/// 2. resolve the spaces the batch names (`spaceIDs`; on PostgreSQL, lock each writable one
///    first, `toLock(targets:locked:)`) and which of the attachments it references the caller
///    may read (`referencedDigests`), and divide the batch by history (`judge(targets:readableAttachments:)`),
///    reading the current state of each refused record the caller may read;
/// 3. plan and write each group (`BatchPlanner`), or, after the database refused a write, each
///    mutation alone (`refusedByDatabase(_:reason:)` for the one it refuses);
/// 4. answer (`response(groups:refused:)`), announce (`signals(for:)`), and keep the client's
///    position and results (`keeping(_:)`).
struct PushSteps {
    let caller: Caller
    let clientID: String
    let batch: SpacedBatch
    /// The client as the push found it: its highest processed mutation id and its count of pushes.
    private(set) var lastMutationID: Int64 = 0
    private(set) var pushes: Int64 = 0
    /// Whether the server has no row of the client yet.
    private(set) var isNewClient = true
    /// The first results of the mutations this push resends.
    private(set) var replays: [Int64: RecentResults.Kept] = [:]

    init(_ mutations: [IncomingMutation], caller: Caller, clientID: String) {
        self.caller = caller
        self.clientID = clientID
        self.batch = SpacedBatch(mutations)
    }

    var mutations: [IncomingMutation] { batch.mutations }

    // MARK: 1. The client

    /// The client as read under the user's lock; `nil`: the server has no row of it. A client is
    /// new by its row alone: rows from before `pushes` was counted hold 0 there.
    mutating func client(_ found: (lastMutationID: Int64, pushes: Int64)?) {
        lastMutationID = found?.lastMutationID ?? 0
        pushes = found?.pushes ?? 0
        isNewClient = found == nil
    }

    /// A new client is one more of the user's, within the limit.
    func admit(existingClients: Int) throws(ProtocolViolation) {
        if existingClients >= ProtocolLimits.maxClientsPerUser { throw ProtocolViolation.tooManyClients }
    }

    /// Most pushes carry new ids only: the kept results are read for a resend alone.
    var needsKeptResults: Bool { mutations.contains { $0.mutation.id <= lastMutationID } }

    /// The slot of the client's newer kept results: the older is read first, so the newer wins.
    var newerSlot: Int64 { (pushes - 1) % 2 }

    /// The kept results as read, the older slot first.
    mutating func replay(_ kept: [Data]) throws {
        replays = try RecentResults.decode(kept)
    }

    // MARK: 2. The spaces

    /// The ids of the spaces the batch names, sorted.
    var spaceIDs: [String] { batch.spaceIDs }

    /// The spaces of `targets` the batch may write and whose change lock is not yet held, in the
    /// order to take them (by key, after the user's: no two pushes wait for each other in a cycle).
    func toLock(targets: [String: SpacedBatch.Target], locked: Set<Int64>) -> [Int64] {
        targets.values.filter { (caller.isService || $0.role?.canWrite == true) && !locked.contains($0.key) }.map(\.key).sorted()
    }

    /// The batch divided by history, by the spaces as resolved; the refusals the caller may read
    /// the record of, whose `current` the engine fills in.
    func judge(
        targets: [String: SpacedBatch.Target],
        readableAttachments: Set<String> = []
    ) -> (groups: [SpacedBatch.Group], refused: [Int64: PushResult], readable: [SpacedBatch.ReadableRefusal]) {
        let (groups, refused) = batch.groups(
            caller: caller,
            clientID: clientID,
            targets: targets,
            lastMutationID: lastMutationID,
            replays: replays,
            readableAttachments: readableAttachments
        )
        return (groups, refused, batch.readableRefusals(refused, targets: targets))
    }

    /// The attachments the batch's new mutations reference, which the engine reads whether the
    /// caller may read (`readableAttachments` of `judge`): a mutation referencing one they may
    /// not is `rejected` with `attachment_missing`.
    var referencedDigests: [String] {
        Array(Set(mutations.lazy.filter { $0.mutation.id > lastMutationID && $0.rejection == nil }.flatMap { $0.mutation.attachments ?? [] }))
            .sorted()
    }

    // MARK: 3. Writing

    /// The result of a mutation whose write the database refused when applied alone: the planner
    /// should make that impossible; if a rule was missed, the batch still gets one result per
    /// mutation instead of a 500.
    static func refusedByDatabase(_ incoming: IncomingMutation, reason: String?) -> PushResult {
        PushResult(
            id: incoming.mutation.id,
            status: .rejected,
            entityID: nil,
            version: nil,
            error: "the server cannot store this mutation: \(reason ?? "a constraint failed")"
        )
    }

    // MARK: 4. Answering

    func response(groups: [PushResponse], refused: [Int64: PushResult]) -> PushResponse {
        batch.response(lastMutationID: lastMutationID, groups: groups, refused: refused)
    }

    /// What the push changed, for the event streams.
    func signals(for response: PushResponse) -> [ChangeSignal] {
        ChangeSignal.of(push: mutations, response: response, after: lastMutationID, caller: caller, clientID: clientID)
    }

    /// What the client's row and kept results become.
    struct Keeping {
        var lastMutationID: Int64
        /// The slot the results go in: the older of the two.
        var slot: Int64
        var results: Data
    }

    /// What to keep of `response`; `nil` for a push of resent mutations only, which changes nothing.
    func keeping(_ response: PushResponse) -> Keeping? {
        guard response.lastMutationID > lastMutationID else { return nil }
        return Keeping(
            lastMutationID: response.lastMutationID,
            slot: pushes % 2,
            results: RecentResults.encode(response.results, of: mutations, lastMutationID: lastMutationID, replays: replays)
        )
    }
}
