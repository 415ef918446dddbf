import FerryProtocol
import Testing

@testable import Ferry

/// What a push answer means, decided without a database (`AnswerPlan`); `Outbox.apply`
/// carries it out, and the outbox and conflict suites check what that does to the store.
@Suite("Answer plan")
struct AnswerPlanTests {
    static func upsert(_ id: Int64, _ entityID: String, base: Int64? = nil, data: String = #"{"v":1}"#) -> OutgoingMutation {
        OutgoingMutation(id: id, entity: "notes", entityID: entityID, op: .upsert, dataText: data, baseVersion: base)
    }

    static func batch(_ mutations: [OutgoingMutation], clientID: String = "c1", firstSent: Set<Int64> = [], unsent: [Int64] = []) -> OutboxBatch {
        var batch = OutboxBatch(entryCount: mutations.count + unsent.count, clientID: clientID, mutations: mutations, firstSent: firstSent)
        for mutation in mutations { batch.entries[mutation.id] = [mutation.id * 10, mutation.id * 10 + 1] }
        batch.unsent = unsent
        return batch
    }

    @Test("attachment_missing is no dead letter: its attachments upload first and the change goes again, counted apart")
    func attachmentMissing() {
        var photo = Self.upsert(1, "j1")
        photo.attachments = ["sha256:" + String(repeating: "a", count: 64)]
        let response = PushResponse(
            lastMutationID: 2,
            results: [
                PushResult(id: 1, status: .rejected, entityID: nil, version: nil, error: "upload it", code: "attachment_missing"),
                PushResult(id: 2, status: .rejected, entityID: nil, version: nil, error: "no", code: nil),
            ]
        )
        let plan = AnswerPlan(response, to: Self.batch([photo, Self.upsert(2, "n2")]), clientID: "c1", highestSent: 2)
        #expect(plan.steps.map(\.decision) == [.uploadFirst(digests: photo.attachments ?? []), .deadLetter(reason: "no", code: nil, current: nil)])
        let outcome = plan.outcome(unsent: 0)
        #expect(outcome.waitingForAttachments == 2 && outcome.deadLettered == 2 && outcome.acknowledgedEntries == 0)
    }

    @Test("applied, merged, duplicate, rejected and conflict each get their decision; the counts follow")
    func eachStatus() {
        let mutations = (1...5).map { Self.upsert(Int64($0), "n\($0)", base: 2) }
        let current = RecordState(version: 7, deleted: false, data: ["v": .integer(9)])
        let response = PushResponse(
            lastMutationID: 5,
            results: [
                PushResult(id: 1, status: .applied, entityID: "n1", version: 1),
                PushResult(id: 2, status: .merged, entityID: "held-by-key", version: 4),
                PushResult(
                    id: 3,
                    status: .duplicate,
                    entityID: "n3",
                    version: 3,
                    current: RecordState(version: 3, deleted: false, data: ["v": .integer(1)])
                ),
                PushResult(id: 4, status: .rejected, entityID: nil, version: nil, error: "no", code: "forbidden"),
                PushResult(id: 5, status: .conflict, entityID: "holder", version: nil, current: current),
            ]
        )
        let plan = AnswerPlan(response, to: Self.batch(mutations, unsent: [99]), clientID: "c1", highestSent: 5)
        #expect(plan.anotherHolder == nil)
        #expect(plan.underCurrentID)
        #expect(
            plan.steps.map(\.decision) == [
                .finish(written: true, merged: false, version: 1, current: nil),
                .finish(written: true, merged: true, version: 4, current: nil),
                .finish(written: false, merged: false, version: 3, current: RecordState(version: 3, deleted: false, data: ["v": .integer(1)])),
                .deadLetter(reason: "no", code: "forbidden", current: nil),
                .resolve(
                    judged: {
                        var judged = mutations[4]
                        judged.entityID = "holder"
                        return judged
                    }(),
                    current: current,
                    absorbsOwn: true
                ),
            ]
        )
        #expect(plan.steps.map(\.canonical) == [nil, "held-by-key", nil, nil, "holder"])
        #expect(plan.written == [1, 2])
        #expect(plan.lastWritten == [RecordRef(entity: "notes", entityID: "n1"): 1, RecordRef(entity: "notes", entityID: "held-by-key"): 2])
        let outcome = plan.outcome(unsent: 1)
        #expect(outcome.acknowledgedEntries == 1 + 2 * 4)
        #expect(outcome.deadLettered == 2)
        #expect((outcome.merged, outcome.rekeyed, outcome.conflicts) == (1, 2, 1))
    }

    @Test("a rejected mutation is never re-keyed nor takes another record's current, and a conflict of a new record absorbs nothing")
    func rejectedAndNewRecords() {
        let other = RecordState(version: 9, deleted: true, data: nil)
        let own = RecordState(version: 4, deleted: false, data: ["v": .integer(2)])
        let plan = AnswerPlan(
            PushResponse(
                lastMutationID: 3,
                results: [
                    PushResult(id: 1, status: .rejected, entityID: "other", version: 9, current: other, error: nil, code: "forbidden"),
                    PushResult(id: 2, status: .conflict, entityID: "holder", version: nil),
                    PushResult(id: 3, status: .rejected, entityID: "n3", version: 4, current: own, error: nil, code: "unrecognized_status"),
                ]
            ),
            to: Self.batch([Self.upsert(1, "n1"), Self.upsert(2, "n2"), Self.upsert(3, "n3")]),
            clientID: "c1",
            highestSent: 3
        )
        #expect(plan.steps.map(\.canonical) == [nil, "holder", nil])
        #expect(
            plan.steps[0].decision == .deadLetter(reason: "rejected", code: "forbidden", current: nil),
            "another record's state never lands in n1"
        )
        #expect(plan.steps[2].decision == .deadLetter(reason: "rejected", code: "unrecognized_status", current: own))
        guard case .resolve(_, _, let absorbsOwn) = plan.steps[1].decision else {
            Issue.record("not a conflict")
            return
        }
        #expect(!absorbsOwn)
    }

    @Test(
        "another holder of the client id: a first-sent duplicate, a reused id, or an answer above anything sent; its mutations go back to the queue"
    )
    func anotherHolder() {
        let mutations = [Self.upsert(1, "n1"), Self.upsert(2, "n2")]
        let firstSentDuplicate = AnswerPlan(
            PushResponse(
                lastMutationID: 2,
                results: [
                    PushResult(id: 1, status: .applied, entityID: "n1", version: 1),
                    PushResult(
                        id: 2,
                        status: .duplicate,
                        entityID: "n2",
                        version: 1,
                        current: RecordState(version: 1, deleted: false, data: ["v": .integer(1)])
                    ),
                ]
            ),
            to: Self.batch(mutations, firstSent: [2]),
            clientID: "c1",
            highestSent: 2
        )
        #expect(firstSentDuplicate.anotherHolder?.contains("mutation 2 was sent from this store for the first time") == true)
        #expect(firstSentDuplicate.steps.map(\.decision)[1] == .resend)
        #expect(firstSentDuplicate.written == [1])

        let reused = AnswerPlan(
            PushResponse(
                lastMutationID: 2,
                results: [
                    PushResult(id: 1, status: .rejected, entityID: nil, version: nil, error: "reused", code: PushResult.mutationIDReused),
                    PushResult(id: 2, status: .applied, entityID: "n2", version: 1),
                ]
            ),
            to: Self.batch(mutations),
            clientID: "c1",
            highestSent: 2
        )
        #expect(reused.anotherHolder != nil)
        #expect(reused.steps.map(\.decision)[0] == .resend)

        let above = AnswerPlan(
            PushResponse(
                lastMutationID: 9,
                results: [
                    PushResult(id: 1, status: .applied, entityID: "n1", version: 1), PushResult(id: 2, status: .applied, entityID: "n2", version: 1),
                ]
            ),
            to: Self.batch(mutations),
            clientID: "c1",
            highestSent: 2
        )
        #expect(above.anotherHolder?.contains("processed mutation 9") == true)
        // What the server applied is still this store's, acknowledged.
        #expect(above.steps.allSatisfy { $0.decision != .resend })
    }

    @Test("an answer to a batch sent under a client id the store gave up proves nothing about holders, and names no writes as its own")
    func underAnOldClientID() {
        let plan = AnswerPlan(
            PushResponse(lastMutationID: 50, results: [PushResult(id: 1, status: .duplicate, entityID: "n1", version: 1)]),
            to: Self.batch([Self.upsert(1, "n1")], clientID: "old", firstSent: [1]),
            clientID: "new",
            highestSent: 0
        )
        #expect(!plan.underCurrentID)
        #expect(plan.anotherHolder == nil)
        // Still never an acknowledgement: sent for the first time, and answered as already processed.
        #expect(plan.steps[0].decision == .resend)
    }
}
