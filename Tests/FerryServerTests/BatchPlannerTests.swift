import FerryProtocol
import Foundation
import Testing

@testable import FerryServer

/// The push rules as pure logic, without a database: what each mutation's result is and what
/// the storage must write, given the records a batch's lookups found.
@Suite("Batch planner")
struct BatchPlannerTests {
    static func stored(_ id: String, version: Int64, naturalKey: String? = nil, deleted: Bool = false) -> StoredRecord {
        StoredRecord(
            entity: "events",
            entityID: id,
            version: version,
            deleted: deleted,
            naturalKey: naturalKey,
            data: deleted ? nil : Data(#"{"v":\#(version)}"#.utf8)
        )
    }

    static func plan(_ mutations: [Mutation], lastMutationID: Int64 = 0, loaded: [StoredRecord] = []) -> BatchPlanner.BatchPlan {
        var planner = BatchPlanner(clientID: "phone", lastMutationID: lastMutationID, loaded: loaded, now: 1_000)
        return try! planner.plan(mutations.map(IncomingMutation.init))  // no rules: none says "not now"
    }

    @Test("a new record is applied at version 1; an existing one moves up a version; the last mutation id is the batch's highest")
    func upserts() {
        let plan = Self.plan(
            [
                .upsert(id: 1, entity: "events", entityID: "a", data: ["v": .integer(1)]),
                .upsert(id: 2, entity: "events", entityID: "b", data: ["v": .integer(2)]),
            ],
            loaded: [Self.stored("b", version: 4)]
        )
        #expect(plan.response.results.map(\.status) == [.applied, .applied])
        #expect(plan.response.results.map(\.version) == [1, 5])
        #expect(plan.response.lastMutationID == 2)
        #expect(plan.writes.map(\.entityID) == ["a", "b"])
    }

    @Test("an upsert whose natural key another live record holds merges into it, under its id; the mutation's own live record becomes a tombstone")
    func naturalKeyMerge() {
        let plan = Self.plan(
            [.upsert(id: 1, entity: "events", entityID: "local", data: ["v": .integer(9)], naturalKey: "hk:1")],
            loaded: [Self.stored("server", version: 2, naturalKey: "hk:1"), Self.stored("local", version: 1)]
        )
        let result = plan.response.results[0]
        #expect(result.status == .merged)
        #expect(result.entityID == "server")
        #expect(result.version == 3)
        let written = Dictionary(uniqueKeysWithValues: plan.writes.map { ($0.entityID, $0) })
        #expect(written["server"]?.naturalKey == "hk:1")
        #expect(written["local"]?.deleted == true)
        #expect(written["local"]?.version == 2)
    }

    @Test("a base version other than the record's is a conflict that reports the record as it is and writes nothing")
    func conflict() throws {
        let plan = Self.plan(
            [.upsert(id: 1, entity: "events", entityID: "a", data: ["v": .integer(1)], baseVersion: 1)],
            loaded: [Self.stored("a", version: 3)]
        )
        let result = plan.response.results[0]
        #expect(result.status == .conflict)
        #expect(result.current == RecordState(version: 3, deleted: false, data: ["v": .integer(3)]))
        #expect(plan.writes.isEmpty)
    }

    @Test("a delete leaves a tombstone that gives up its natural key; deleting what never existed writes nothing and claims no version")
    func deletes() {
        let plan = Self.plan(
            [.delete(id: 1, entity: "events", entityID: "a"), .delete(id: 2, entity: "events", entityID: "ghost")],
            loaded: [Self.stored("a", version: 2, naturalKey: "hk:a")]
        )
        #expect(plan.response.results.map(\.status) == [.applied, .applied])
        #expect(plan.response.results.map(\.version) == [3, nil])
        #expect(plan.writes.map(\.entityID) == ["a"])
        #expect(plan.writes[0].deleted && plan.writes[0].naturalKey == nil)
        #expect(plan.releasedNaturalKeys == [RecordRef(entity: "events", entityID: "a")])
    }

    @Test(
        "a mutation id at or below the client's last one, with no kept result, is a duplicate that claims nothing and reports the record as it is now"
    )
    func duplicate() {
        let plan = Self.plan(
            [.upsert(id: 7, entity: "events", entityID: "local", data: ["v": .integer(1)], naturalKey: "hk:1")],
            lastMutationID: 9,
            loaded: [Self.stored("server", version: 2, naturalKey: "hk:1")]
        )
        let result = plan.response.results[0]
        #expect(result.status == .duplicate)
        #expect(result.version == nil)
        #expect(result.entityID == "server")
        #expect(result.current?.version == 2)
        #expect(plan.writes.isEmpty)
        #expect(plan.response.lastMutationID == 9)
    }

    @Test("several changes of one record in a batch write its final state once, in the order of its last change")
    func finalStates() {
        let plan = Self.plan([
            .upsert(id: 1, entity: "events", entityID: "a", data: ["v": .integer(1)]),
            .upsert(id: 2, entity: "events", entityID: "b", data: ["v": .integer(1)]),
            .upsert(id: 3, entity: "events", entityID: "a", data: ["v": .integer(2)]),
        ])
        #expect(plan.response.results.map(\.version) == [1, 1, 2])
        #expect(plan.writes.map(\.entityID) == ["b", "a"])
        #expect(plan.writes.map(\.version) == [1, 2])
    }
}
