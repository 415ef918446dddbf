import FerryProtocol
import Foundation

/// A push, driven: the order and every rule of a push as one state machine, which asks its
/// storage engine for what it needs next and is told the answers, inside the push's transaction.
/// A rule written here is obeyed by both engines; an engine only reads and writes:
///
/// ```swift
/// var driver = PushDriver(mutations, caller: caller, clientID: clientID, locksSpaces: true)
/// while let need = driver.next() {
///     switch need {
///     case .client: driver.client(try readClient())
///     // … one case per `Need`, each answered by the matching method
///     }
/// }
/// return driver.response
/// ```
///
/// The order: under the user's change lock, the client (``client(_:)``; a new one is counted,
/// ``admit(existingClients:)``; a resend reads its kept results, ``replay(_:)``); the spaces the
/// batch names (``spaces(_:)``; where several writers share the database, each writable one is
/// locked and the memberships read again until no new one is writable, ``spacesLocked()``); which
/// referenced attachments the caller may read (``readableAttachments(_:)``); the judgement by
/// history (`SpacedBatch`), with the current record of each refusal the caller may read
/// (``currentRecords(_:)``); each history applied (``applied(_:)``, `BatchPlanner`); then what
/// changed announced and the client's position and results kept.
struct PushDriver {
    /// What the engine is to do next, inside the push's transaction.
    enum Need {
        /// Take the user's change lock (where the engine locks) and read the client's row.
        case client
        /// Count the user's clients: this one has no row yet.
        case clientCount
        /// Read the client's kept results, the older slot first (the newer is `newerSlot`).
        case keptResults(newerSlot: Int64)
        /// Read the live spaces of these ids, with the caller's role in each.
        case spaces([String])
        /// Take these spaces' change locks, in this order.
        case lockSpaces([Int64])
        /// Read which of these attachments the caller may read (under their shared locks, where
        /// a purge may run beside the push).
        case readableAttachments([String])
        /// Read the current state of each refused record the caller may read, in this order.
        case currentRecords([SpacedBatch.ReadableRefusal])
        /// Apply each history's mutations (load, plan with `BatchPlanner`, write), in order.
        case apply([SpacedBatch.Group])
        /// Announce what the push changed to the event streams (in the transaction, or after
        /// its commit).
        case announce([ChangeSignal])
        /// Keep the client's new position and its results.
        case keep(Keeping)
    }

    /// What the client's row and kept results become.
    struct Keeping: Equatable {
        var lastMutationID: Int64
        /// The slot the results go in: the older of the two.
        var slot: Int64
        var results: Data
    }

    private enum Step {
        case client, clientCount, keptResults, spaces, lockSpaces, attachments, currentRecords, apply, announce, keep, done
    }

    let caller: Caller
    let clientID: String
    let batch: SpacedBatch
    /// Whether other writers share the database, so a space the batch writes is locked first.
    let locksSpaces: Bool
    private var step = Step.client
    /// The client as the push found it: its highest processed mutation id and its count of pushes.
    private(set) var lastMutationID: Int64 = 0
    private var pushes: Int64 = 0
    private var isNewClient = true
    /// The first results of the mutations this push resends.
    private(set) var replays: [Int64: RecentResults.Kept] = [:]
    private var targets: [String: SpacedBatch.Target] = [:]
    private var lockedSpaces: Set<Int64> = []
    private var readable: Set<String> = []
    private var groups: [SpacedBatch.Group] = []
    private var refused: [Int64: PushResult] = [:]
    private var readableRefusals: [SpacedBatch.ReadableRefusal] = []
    /// The push's answer, once the histories are applied.
    private(set) var response = PushResponse(lastMutationID: 0, results: [])
    /// What to keep of the response; `nil` for a push of resent mutations only, which changes nothing.
    private var keeping: Keeping?

    init(_ mutations: [IncomingMutation], caller: Caller, clientID: String, locksSpaces: Bool) {
        (self.caller, self.clientID, self.locksSpaces) = (caller, clientID, locksSpaces)
        batch = SpacedBatch(mutations)
    }

    var mutations: [IncomingMutation] { batch.mutations }

    /// The caller's role in each space the batch writes to, as read in the push's transaction:
    /// what the app's rules are told (`RuleJudge`).
    var roles: [String: SpaceRole] { targets.compactMapValues(\.role) }

    /// What the engine is to do next; `nil` once the push is done (``response``).
    func next() -> Need? {
        switch step {
        case .client: .client
        case .clientCount: .clientCount
        case .keptResults: .keptResults(newerSlot: (pushes - 1) % 2)
        case .spaces: .spaces(batch.spaceIDs)
        case .lockSpaces: .lockSpaces(spacesToLock)
        case .attachments: .readableAttachments(referencedDigests)
        case .currentRecords: .currentRecords(readableRefusals)
        case .apply: .apply(groups)
        case .announce: .announce(ChangeSignal.of(push: mutations, response: response, after: lastMutationID, caller: caller, clientID: clientID))
        case .keep: keeping.map { .keep($0) }
        case .done: nil
        }
    }

    // MARK: The client

    /// The client as read under the user's lock; `nil`: the server has no row of it. A client is
    /// new by its row alone: rows from before `pushes` was counted hold 0 there.
    mutating func client(_ found: (lastMutationID: Int64, pushes: Int64)?) {
        precondition(step == .client)
        (lastMutationID, pushes, isNewClient) = (found?.lastMutationID ?? 0, found?.pushes ?? 0, found == nil)
        if isNewClient { step = .clientCount } else { clientKnown() }
    }

    /// A new client is one more of the user's, within the limit.
    mutating func admit(existingClients: Int) throws(ProtocolViolation) {
        precondition(step == .clientCount)
        if existingClients >= ProtocolLimits.maxClientsPerUser { throw ProtocolViolation.tooManyClients }
        clientKnown()
    }

    /// The kept results as read, the older slot first.
    mutating func replay(_ kept: [Data]) throws {
        precondition(step == .keptResults)
        replays = try RecentResults.decode(kept)
        replaysKnown()
    }

    /// Most pushes carry new ids only: the kept results are read for a resend alone.
    private mutating func clientKnown() {
        if mutations.contains(where: { $0.mutation.id <= lastMutationID }) { step = .keptResults } else { replaysKnown() }
    }

    private mutating func replaysKnown() {
        if batch.spaceIDs.isEmpty { spacesKnown() } else { step = .spaces }
    }

    // MARK: The spaces

    /// The live spaces the batch names, by id, with the caller's role in each, as read now.
    mutating func spaces(_ found: [String: SpacedBatch.Target]) {
        precondition(step == .spaces)
        targets = found
        if locksSpaces && !spacesToLock.isEmpty { step = .lockSpaces } else { spacesKnown() }
    }

    /// The spaces of ``next()``'s `lockSpaces` are locked: their memberships are read again, so
    /// every space the judgement lets the batch write is locked.
    mutating func spacesLocked() {
        precondition(step == .lockSpaces)
        lockedSpaces.formUnion(spacesToLock)
        step = .spaces
    }

    /// The spaces the batch may write whose change lock is not yet held, in the order to take
    /// them (by key, after the user's: no two pushes wait for each other in a cycle).
    private var spacesToLock: [Int64] {
        targets.values.filter { (caller.isService || $0.role?.canWrite == true) && !lockedSpaces.contains($0.key) }.map(\.key).sorted()
    }

    private mutating func spacesKnown() {
        if referencedDigests.isEmpty { judge() } else { step = .attachments }
    }

    // MARK: The attachments and the judgement

    /// The attachments the batch's new mutations reference: a mutation referencing one the
    /// caller may not read is `rejected` with `attachment_missing`.
    private var referencedDigests: [String] {
        Array(Set(mutations.lazy.filter { $0.mutation.id > lastMutationID && $0.rejection == nil }.flatMap { $0.mutation.attachments ?? [] }))
            .sorted()
    }

    /// Those of the referenced attachments the caller may read.
    mutating func readableAttachments(_ digests: Set<String>) {
        precondition(step == .attachments)
        readable = digests
        judge()
    }

    /// Divides the batch by history.
    private mutating func judge() {
        (groups, refused) = batch.groups(
            caller: caller,
            clientID: clientID,
            targets: targets,
            lastMutationID: lastMutationID,
            replays: replays,
            readableAttachments: readable
        )
        readableRefusals = batch.readableRefusals(refused, targets: targets)
        step = readableRefusals.isEmpty ? .apply : .currentRecords
    }

    /// The current state of each record of ``next()``'s `currentRecords`, in its order: each
    /// refusal carries it.
    mutating func currentRecords(_ states: [RecordState]) {
        precondition(step == .currentRecords && states.count == readableRefusals.count)
        for (refusal, state) in zip(readableRefusals, states) { refused[refusal.id]?.current = state }
        step = .apply
    }

    // MARK: Writing and keeping

    /// The answers of the histories of ``next()``'s `apply`, in its order.
    mutating func applied(_ responses: [PushResponse]) {
        precondition(step == .apply && responses.count == groups.count)
        response = batch.response(lastMutationID: lastMutationID, groups: responses, refused: refused)
        if response.lastMutationID > lastMutationID {
            keeping = Keeping(
                lastMutationID: response.lastMutationID,
                slot: pushes % 2,
                results: RecentResults.encode(response.results, of: mutations, lastMutationID: lastMutationID, replays: replays)
            )
        }
        step = .announce
    }

    /// The push's changes are announced (or will be, at the commit).
    mutating func announced() {
        precondition(step == .announce)
        step = keeping == nil ? .done : .keep
    }

    /// The client's position and results are kept.
    mutating func kept() {
        precondition(step == .keep)
        step = .done
    }

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
}
