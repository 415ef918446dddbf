import FerryProtocol

/// A push's batch divided by the history each mutation writes: the personal space, and each
/// space it names, which the storage applies one after another in the push's transaction, each
/// with the planner as a personal batch. Exactly-once bookkeeping stays the client's: one
/// `lastMutationID` and one set of kept results for the whole batch.
struct SpacedBatch {
    /// A space a batch writes to, as the push's transaction resolved it.
    struct Target: Sendable {
        var key: Int64
        /// The caller's role; `nil` when not a member.
        var role: SpaceRole?
    }

    /// The mutations of one history, in request order.
    struct Group {
        /// The `user_id` of its rows: the user's id, or the space's partition.
        var partition: String
        /// Who writes its rows (`StoredRecord.writtenBy`).
        var writer: String
        var mutations: [IncomingMutation]
    }

    let mutations: [IncomingMutation]
    /// The ids of the spaces the batch names, sorted; mutations naming an invalid id are
    /// planned with the personal ones, which the planner rejects for it.
    let spaceIDs: [String]

    init(_ mutations: [IncomingMutation]) {
        self.mutations = mutations
        spaceIDs = Set(mutations.compactMap { $0.rejection == nil ? $0.mutation.space : nil }).sorted()
    }

    /// Divides the batch by history given the spaces as resolved (by id, live ones only):
    /// the mutations the caller may not write are answered here (`refused`), each alone.
    func groups(
        caller: Caller,
        clientID: String,
        targets: [String: Target],
        lastMutationID: Int64,
        replays: [Int64: RecentResults.Kept],
        readableAttachments: Set<String> = []
    ) -> (groups: [Group], refused: [Int64: PushResult]) {
        var personal: [IncomingMutation] = []
        var bySpace: [Int64: [IncomingMutation]] = [:]
        var refused: [Int64: PushResult] = [:]
        for incoming in mutations {
            if incoming.mutation.id > lastMutationID, incoming.rejection == nil,
                let missing = incoming.mutation.attachments?.first(where: { !readableAttachments.contains($0) })
            {
                refused[incoming.mutation.id] = Self.missingAttachment(id: incoming.mutation.id, digest: missing)
                continue
            }
            guard let space = incoming.mutation.space, incoming.rejection == nil else {
                personal.append(incoming)
                continue
            }
            let target = targets[space]
            // A change made in a space since deleted never lands in one created later under its id.
            // Only a member of the space holding the id now (or a service) is told so: to anyone
            // else it stays a space they are not a member of, its key unrevealed.
            let sameSpace =
                incoming.mutation.spaceIncarnation.map { $0 == target.map { SpaceRules.incarnation(of: $0.key) } } ?? true
                || (target != nil && target?.role == nil && !caller.isService)
            if let target, sameSpace, caller.isService || target.role?.canWrite == true {
                bySpace[target.key, default: []].append(incoming)
            } else if incoming.mutation.id <= lastMutationID, let kept = replays[incoming.mutation.id], kept.answers(incoming) {
                refused[incoming.mutation.id] = kept.result(for: incoming.mutation)
            } else if !sameSpace {
                refused[incoming.mutation.id] = SpaceRules.deletedSpaceWrite(id: incoming.mutation.id, space: space)
            } else {
                refused[incoming.mutation.id] = SpaceRules.refusedWrite(id: incoming.mutation.id, space: space, role: target?.role)
            }
        }
        let writer = SpacePartition.writer(clientID: clientID, userID: caller.userID)
        var groups = personal.isEmpty ? [] : [Group(partition: caller.userID, writer: clientID, mutations: personal)]
        for key in bySpace.keys.sorted() {
            groups.append(Group(partition: SpacePartition.name(key), writer: writer, mutations: bySpace[key]!))
        }
        return (groups, refused)
    }

    /// The answer to mutation `id` referencing `digest`, which the caller may not read: the
    /// client uploads it first and sends the change again (PROTOCOL.md, "Attachments").
    static func missingAttachment(id: Int64, digest: String) -> PushResult {
        PushResult(
            id: id,
            status: .rejected,
            entityID: nil,
            version: nil,
            error: "attachment \(digest) is not on the server for you: upload it (POST /v1/attachments/\(digest)), then send the change again",
            code: ErrorCode.attachmentMissing.rawValue
        )
    }

    /// A refused mutation of a record the caller may still read (a reader of its space): its
    /// rejection carries the record as the server holds it, which the device shows again
    /// instead of its refused change (PROTOCOL.md, "Spaces").
    struct ReadableRefusal {
        var id: Int64
        /// The `user_id` of the space's rows (`SpacePartition`).
        var partition: String
        var entity: String
        var entityID: String

        var record: RecordRef { RecordRef(entity: entity, entityID: entityID) }
    }

    /// The refusals in `refused` that the caller may read the record of: a member, without the
    /// role to write, of the space that holds the id now (for a change made in a space since
    /// deleted, the one created after it: the record as that space holds it, or none).
    func readableRefusals(_ refused: [Int64: PushResult], targets: [String: Target]) -> [ReadableRefusal] {
        let codes = [ErrorCode.forbidden.rawValue, ErrorCode.spaceDeleted.rawValue]
        return mutations.compactMap { incoming in
            let mutation = incoming.mutation
            guard let code = refused[mutation.id]?.code, codes.contains(code), let space = mutation.space, let target = targets[space],
                target.role != nil
            else { return nil }
            return ReadableRefusal(id: mutation.id, partition: SpacePartition.name(target.key), entity: mutation.entity, entityID: mutation.entityID)
        }
    }

    /// The batch's response from each group's and the refused mutations' results, in request order.
    func response(lastMutationID: Int64, groups: [PushResponse], refused: [Int64: PushResult]) -> PushResponse {
        let last = max(lastMutationID, mutations.last?.mutation.id ?? 0)
        // One history answered every mutation (a batch without spaces): its results are in order.
        if refused.isEmpty, groups.count == 1, groups[0].results.count == mutations.count {
            return PushResponse(lastMutationID: last, results: groups[0].results)
        }
        var results = refused
        for response in groups {
            for result in response.results { results[result.id] = result }
        }
        return PushResponse(lastMutationID: last, results: mutations.map { results[$0.mutation.id]! })
    }
}
