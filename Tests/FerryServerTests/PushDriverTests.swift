import FerryProtocol
import Foundation
import Testing

@testable import FerryServer

/// The push's order and rules, driven with canned answers as an engine would give them
/// (`PushDriver`): what each engine is asked, in which order, and what the answer becomes. The
/// storage suites show both engines obey the same driver.
@Suite("Push driver")
struct PushDriverTests {
    static let alice = Caller(userID: "alice")

    static func job(_ id: Int64, space: String? = nil, photo: String? = nil) -> IncomingMutation {
        IncomingMutation(
            Mutation(
                id: id,
                entity: "jobs",
                entityID: "j\(id)",
                op: .upsert,
                data: ["title": .string("job \(id)")],
                space: space,
                attachments: photo.map { [$0] }
            )
        )
    }

    /// A group's answer as an engine's `BatchPlanner` gives it: each mutation applied at version 1.
    static func applied(_ group: SpacedBatch.Group) -> PushResponse {
        PushResponse(
            lastMutationID: group.mutations.map(\.mutation.id).max() ?? 0,
            results: group.mutations.map { PushResult(id: $0.mutation.id, status: .applied, entityID: $0.mutation.entityID, version: 1) }
        )
    }

    /// What the driver asks, by name, when every need is answered by `answer` (and by the
    /// defaults below for what `answer` leaves).
    static func drive(_ driver: inout PushDriver, answer: (PushDriver.Need, inout PushDriver) throws -> Bool = { _, _ in false }) throws -> [String] {
        var asked: [String] = []
        while let need = driver.next() {
            if try answer(need, &driver) {
                asked.append("\(need)".prefix { $0 != "(" }.description)
                continue
            }
            switch need {
            case .client: driver.client(nil)
            case .clientCount: try driver.admit(existingClients: 0)
            case .keptResults: try driver.replay([])
            case .spaces: driver.spaces([:])
            case .lockSpaces: driver.spacesLocked()
            case .readableAttachments(let digests): driver.readableAttachments(Set(digests))
            case .currentRecords(let refusals): driver.currentRecords(refusals.map { _ in .absent })
            case .apply(let groups): driver.applied(groups.map(applied))
            case .announce: driver.announced()
            case .keep: driver.kept()
            }
            asked.append("\(need)".prefix { $0 != "(" }.description)
        }
        return asked
    }

    @Test("a new client's first push: the client read and counted, its histories applied, announced, and its results kept")
    func newClient() throws {
        var driver = PushDriver([Self.job(1), Self.job(2)], caller: Self.alice, clientID: "c1", locksSpaces: true)
        var kept: PushDriver.Keeping?
        let asked = try Self.drive(&driver) { need, driver in
            guard case .keep(let keeping) = need else { return false }
            kept = keeping
            driver.kept()
            return true
        }
        #expect(asked == ["client", "clientCount", "apply", "announce", "keep"])
        #expect(driver.response.lastMutationID == 2 && driver.response.results.map(\.status) == [.applied, .applied])
        #expect(kept?.lastMutationID == 2 && kept?.slot == 0)
    }

    @Test("a new client past the user's limit is refused before anything is read of the batch")
    func tooManyClients() {
        var driver = PushDriver([Self.job(1)], caller: Self.alice, clientID: "c1001", locksSpaces: false)
        driver.client(nil)
        #expect(throws: ProtocolViolation.tooManyClients) { try driver.admit(existingClients: ProtocolLimits.maxClientsPerUser) }
    }

    @Test("a resend reads the kept results from the newer slot's other first; a push of resent mutations only keeps nothing")
    func resend() throws {
        var driver = PushDriver([Self.job(4)], caller: Self.alice, clientID: "c1", locksSpaces: false)
        var slot: Int64?
        let asked = try Self.drive(&driver) { need, driver in
            switch need {
            case .client: driver.client((lastMutationID: 5, pushes: 3))
            case .keptResults(let newerSlot):
                slot = newerSlot
                try driver.replay([])
            default: return false
            }
            return true
        }
        #expect(asked == ["client", "keptResults", "apply", "announce"], "no count for a known client, no keep for a resend")
        #expect(slot == 0, "three pushes: the newer results are in slot (3 - 1) % 2")
    }

    @Test("a space that becomes writable between two reads is locked and read again; an engine whose writer is single never locks")
    func spacesLockedUntilStable() throws {
        var driver = PushDriver([Self.job(1, space: "crew"), Self.job(2, space: "yard")], caller: Self.alice, clientID: "c1", locksSpaces: true)
        var reads = 0
        var locks: [[Int64]] = []
        let asked = try Self.drive(&driver) { need, driver in
            switch need {
            case .spaces(let ids):
                #expect(ids == ["crew", "yard"])
                reads += 1
                // crew is writable at once; yard becomes writable at the second read.
                driver.spaces(["crew": .init(key: 7, role: .write), "yard": .init(key: 3, role: reads == 1 ? .read : .write)])
            case .lockSpaces(let keys):
                locks.append(keys)
                driver.spacesLocked()
            default: return false
            }
            return true
        }
        #expect(locks == [[7], [3]] && reads == 3)
        #expect(asked == ["client", "clientCount", "spaces", "lockSpaces", "spaces", "lockSpaces", "spaces", "apply", "announce", "keep"])
        #expect(driver.response.results.map(\.status) == [.applied, .applied])

        var single = PushDriver([Self.job(1, space: "crew")], caller: Self.alice, clientID: "c1", locksSpaces: false)
        let singleAsked = try Self.drive(&single) { need, driver in
            guard case .spaces = need else { return false }
            driver.spaces(["crew": .init(key: 7, role: .write)])
            return true
        }
        #expect(!singleAsked.contains("lockSpaces"))
    }

    @Test("a reader's write is refused with the record as it is now, which the engine reads; it is never applied")
    func readerRefusedWithCurrent() throws {
        var driver = PushDriver([Self.job(1, space: "crew")], caller: Self.alice, clientID: "c1", locksSpaces: true)
        var applied: [SpacedBatch.Group] = []
        let current = RecordState(version: 3, deleted: false, data: ["title": .string("theirs")])
        let asked = try Self.drive(&driver) { need, driver in
            switch need {
            case .spaces: driver.spaces(["crew": .init(key: 7, role: .read)])
            case .currentRecords(let refusals):
                #expect(refusals.map(\.entityID) == ["j1"])
                driver.currentRecords([current])
            case .apply(let groups):
                applied = groups
                driver.applied([])
            default: return false
            }
            return true
        }
        #expect(asked.contains("currentRecords") && !asked.contains("lockSpaces"))
        #expect(applied.isEmpty)
        #expect(driver.response.results.first?.status == .rejected && driver.response.results.first?.current == current)
    }

    @Test("the attachment rule: the engine is asked once for the new mutations' digests; one the caller may not read is attachment_missing")
    func attachmentReadability() throws {
        let (mine, theirs) = ("sha256:" + String(repeating: "a", count: 64), "sha256:" + String(repeating: "b", count: 64))
        var driver = PushDriver(
            [Self.job(3, photo: theirs), Self.job(6, photo: mine), Self.job(7, photo: theirs)],
            caller: Self.alice,
            clientID: "c1",
            locksSpaces: true
        )
        var asked: [[String]] = []
        var applied: [Int64] = []
        _ = try Self.drive(&driver) { need, driver in
            switch need {
            case .client: driver.client((lastMutationID: 5, pushes: 1))
            case .readableAttachments(let digests):
                asked.append(digests)
                driver.readableAttachments([mine])
            case .apply(let groups):
                applied = groups.flatMap(\.mutations).map(\.mutation.id)
                driver.applied(groups.map(Self.applied))
            default: return false
            }
            return true
        }
        #expect(asked == [[mine, theirs]], "a resent mutation (3) asks nothing")
        #expect(applied == [3, 6], "the resend is judged by its kept result, 7 never reaches the planner")
        #expect(driver.response.results.last?.code == ErrorCode.attachmentMissing.rawValue)
    }
}
