import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md `POST /v1/push`, rule by rule, against a live server and a SQLite file.
@Suite("Push", .timeLimit(.minutes(1)))
struct PushTests {
    @Test("applied upserts start at version 1 and grow by exactly 1; results come in request order", arguments: StorageBackend.allCases)
    func versions(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let first = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "e-1", data: .value(1)),
                        .upsert(id: 2, entity: "events", entityID: "e-2", data: .value(2)),
                        .upsert(id: 5, entity: "events", entityID: "e-1", data: .value(3)),
                    ]
                ),
                token: token
            )
            #expect(first.lastMutationID == 5)
            #expect(first.results.map(\.id) == [1, 2, 5])
            #expect(first.results.map(\.status) == [.applied, .applied, .applied])
            #expect(first.results.map(\.version) == [1, 1, 2])
            let records = try await server.pullAll(token: token)
            #expect(records["events/e-1"]?.version == 2)
            #expect(records["events/e-1"]?.data == .value(3))
        }
    }

    @Test(
        "resending a whole batch, then a partly overlapping one, answers each resent mutation with its first result and applies nothing twice",
        arguments: StorageBackend.allCases
    )
    func replay(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let batch = PushRequest(
                clientID: "c1",
                mutations: [
                    .upsert(id: 10, entity: "events", entityID: "e-1", data: .value(1)),
                    .upsert(id: 11, entity: "events", entityID: "e-2", data: .value(2)),
                ]
            )
            let first = try await server.pushOK(batch, token: token)
            let replayed = try await server.pushOK(batch, token: token)
            #expect(replayed == first)
            #expect(replayed.results.map(\.status) == [.applied, .applied])
            #expect(replayed.results.map(\.version) == [1, 1])
            #expect(replayed.lastMutationID == 11)

            let overlapping = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 11, entity: "events", entityID: "e-2", data: .value(2)),
                        .upsert(id: 12, entity: "events", entityID: "e-3", data: .value(3)),
                    ]
                ),
                token: token
            )
            #expect(overlapping.results.map(\.status) == [.applied, .applied])
            #expect(overlapping.results.map(\.version) == [1, 1])
            #expect(overlapping.lastMutationID == 12)
            let records = try await server.pullAll(token: token)
            #expect(records["events/e-1"]?.version == 1)
            #expect(records["events/e-2"]?.version == 1)
            #expect(records["events/e-2"]?.data == .value(2))
            #expect(records["events/e-3"]?.version == 1)
        }
    }

    @Test("ids are tracked per (user, clientID): another client's ids are independent", arguments: StorageBackend.allCases)
    func perClient(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "a", mutations: [.upsert(id: 7, entity: "n", entityID: "1", data: .value(1))]),
                token: token
            )
            let other = try await server.pushOK(
                PushRequest(clientID: "b", mutations: [.upsert(id: 7, entity: "n", entityID: "1", data: .value(2))]),
                token: token
            )
            #expect(other.results.first?.status == .applied)
            #expect(other.results.first?.version == 2)
            let bob = try await TestServer.token(for: "bob")
            let bobs = try await server.pushOK(
                PushRequest(clientID: "a", mutations: [.upsert(id: 7, entity: "n", entityID: "1", data: .value(3))]),
                token: bob
            )
            #expect(bobs.results.first?.status == .applied)
            #expect(bobs.results.first?.version == 1)
        }
    }

    @Test("ids that are not strictly increasing are refused with 400 and change nothing", arguments: StorageBackend.allCases)
    func nonIncreasingIDs(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for ids: [Int64] in [[3, 2], [4, 4], [0, 1], [ProtocolLimits.maxMutationID + 1]] {
                let reply = try await server.push(
                    PushRequest(
                        clientID: "c1",
                        mutations: ids.enumerated().map { index, id in
                            .upsert(id: id, entity: "events", entityID: "e-\(index)", data: .value(1))
                        }
                    ),
                    token: token
                )
                #expect(reply.status == 400)
                #expect(reply.errorCode == "bad_request")
                #expect(reply.errorMessage?.contains("mutations[") == true)
            }
            #expect(try await server.pullAll(token: token).isEmpty)
            // lastMutationID did not move either: id 1 is still new.
            let fresh = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "events", entityID: "e-0", data: .value(1))]),
                token: token
            )
            #expect(fresh.results.first?.status == .applied)
        }
    }

    @Test("a batch over 1000 mutations or over 4 MiB answers 413 naming both limits, and changes nothing", arguments: StorageBackend.allCases)
    func overLimits(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let tooMany = PushRequest(
                clientID: "c1",
                mutations: (1...1001).map {
                    .upsert(id: Int64($0), entity: "events", entityID: "e-\($0)", data: .value(1))
                }
            )
            let reply = try await server.push(tooMany, token: token)
            #expect(reply.status == 413)
            #expect(reply.errorCode == "batch_too_large")
            #expect(reply.errorMessage?.contains("1000") == true)
            #expect(reply.errorMessage?.contains("4 MiB") == true)

            let big = String(repeating: "x", count: 200_000)
            let tooBig = PushRequest(
                clientID: "c1",
                mutations: (1...25).map {
                    .upsert(id: Int64($0), entity: "events", entityID: "e-\($0)", data: ["blob": .string(big)])
                }
            )
            let bigReply = try await server.push(tooBig, token: token)
            #expect(bigReply.status == 413)
            #expect(bigReply.errorCode == "batch_too_large")
            #expect(bigReply.errorMessage?.contains("1000") == true)
            #expect(try await server.pullAll(token: token).isEmpty)
        }
    }

    @Test("a natural-key merge, then the same mutation resent, reports the merge both times", arguments: StorageBackend.allCases)
    func naturalKeyMerge(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "phone",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "e-0017", data: .value(1), naturalKey: "hk:9F2A")
                    ]
                ),
                token: token
            )
            let batch = PushRequest(
                clientID: "watch",
                mutations: [
                    .upsert(id: 41, entity: "events", entityID: "local-1", data: .value(1200), naturalKey: "hk:9F2A")
                ]
            )
            let merged = try await server.pushOK(batch, token: token)
            #expect(merged.results.first?.status == .merged)
            #expect(merged.results.first?.entityID == "e-0017")
            #expect(merged.results.first?.version == 2)

            let resent = try await server.pushOK(batch, token: token)  // the first response was "lost"
            #expect(resent == merged)

            let records = try await server.pullAll(token: token)
            #expect(records.count == 1)
            #expect(records["events/e-0017"]?.data == .value(1200))
            #expect(records["events/e-0017"]?.naturalKey == "hk:9F2A")
        }
    }

    @Test("a natural key released and taken in one batch is unique among live records afterwards", arguments: StorageBackend.allCases)
    func naturalKeyHandOver(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        .upsert(id: 1, entity: "s", entityID: "a", data: .value(1), naturalKey: "k1")
                    ]
                ),
                token: token
            )
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        .upsert(id: 2, entity: "s", entityID: "a", data: .value(2), naturalKey: "k2"),
                        .upsert(id: 3, entity: "s", entityID: "b", data: .value(3), naturalKey: "k1"),
                        .delete(id: 4, entity: "s", entityID: "a"),
                        .upsert(id: 5, entity: "s", entityID: "c", data: .value(5), naturalKey: "k2"),
                    ]
                ),
                token: token
            )
            #expect(response.results.map(\.status) == [.applied, .applied, .applied, .applied])
            #expect(response.results.map(\.entityID) == ["a", "b", "a", "c"])
            let records = try await server.pullAll(token: token)
            #expect(records["s/a"]?.op == .delete)
            #expect(records["s/b"]?.naturalKey == "k1")
            #expect(records["s/c"]?.naturalKey == "k2")
        }
    }

    @Test("a rejected mutation in the middle does not stop the ones after it and advances lastMutationID", arguments: StorageBackend.allCases)
    func rejectedInTheMiddle(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let huge = String(repeating: "y", count: ProtocolLimits.maxDataBytes)
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "e-1", data: .value(1)),
                        .upsert(id: 2, entity: "Events!", entityID: "e-2", data: .value(2)),
                        .upsert(id: 3, entity: "events", entityID: "e-3", data: ["blob": .string(huge)]),
                        .upsert(id: 4, entity: "events", entityID: String(repeating: "z", count: 129), data: .value(4)),
                        Mutation(id: 5, entity: "events", entityID: "e-5", op: .delete, data: .value(5)),
                        Mutation(id: 6, entity: "events", entityID: "e-6", op: .upsert),
                        .upsert(id: 7, entity: "events", entityID: "e-7", data: .value(7)),
                    ]
                ),
                token: token
            )
            #expect(response.results.map(\.status) == [.applied, .rejected, .rejected, .rejected, .rejected, .rejected, .applied])
            #expect(response.lastMutationID == 7)
            let reasons = response.results.compactMap(\.error)
            #expect(reasons.count == 5)
            #expect(reasons[0].contains("entity"))
            #expect(reasons[1].contains("262144"))
            #expect(reasons[2].contains("entityID"))
            #expect(reasons[3].contains("data must be absent"))
            #expect(reasons[4].contains("data is required"))
            // The rejected id is spent: resending it learns the rejection again, never a retry.
            let resent = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 2, entity: "Events!", entityID: "e-2", data: .value(2))
                    ]
                ),
                token: token
            )
            #expect(resent.results.first?.status == .rejected)
            #expect(resent.results.first?.error == reasons[0])
            #expect(Set(try await server.pullAll(token: token).keys) == ["events/e-1", "events/e-7"])
        }
    }

    @Test("baseVersion: a mismatch is a conflict carrying the current record, and nothing is applied", arguments: StorageBackend.allCases)
    func conflicts(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "n", data: .value(1), baseVersion: 0),
                        .upsert(id: 2, entity: "notes", entityID: "n", data: .value(2), baseVersion: 0),
                        .upsert(id: 3, entity: "notes", entityID: "n", data: .value(3), baseVersion: 1),
                        .upsert(id: 4, entity: "notes", entityID: "n", data: .value(4), baseVersion: 1),
                        .upsert(id: 5, entity: "notes", entityID: "missing", data: .value(5), baseVersion: 3),
                    ]
                ),
                token: token
            )
            #expect(response.results.map(\.status) == [.applied, .conflict, .applied, .conflict, .conflict])
            #expect(response.results[1].current?.withoutChangedAt == RecordState(version: 1, deleted: false, data: .value(1)))
            #expect(response.results[3].current?.withoutChangedAt == RecordState(version: 2, deleted: false, data: .value(3)))
            #expect(response.results[3].version == 2)
            #expect(response.results[4].current == nil)
            #expect(response.results[4].version == nil)
            #expect(response.lastMutationID == 5)
            let records = try await server.pullAll(token: token)
            #expect(records["notes/n"]?.version == 2)
            #expect(records["notes/n"]?.data == .value(3))
            #expect(records["notes/missing"] == nil)
        }
    }

    @Test(
        "deletes leave tombstones with a new version; deleting the unknown gives version null; an upsert revives",
        arguments: StorageBackend.allCases
    )
    func tombstones(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "e-1", data: .value(1)),
                        .delete(id: 2, entity: "events", entityID: "e-1"),
                        .delete(id: 3, entity: "events", entityID: "never"),
                    ]
                ),
                token: token
            )
            #expect(response.results.map(\.status) == [.applied, .applied, .applied])
            #expect(response.results.map(\.version) == [1, 2, nil])
            var records = try await server.pullAll(token: token)
            #expect(records["events/e-1"] == Change(entity: "events", entityID: "e-1", op: .delete, version: 2))
            #expect(records["events/never"] == nil)

            let revived = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 4, entity: "events", entityID: "e-1", data: .value(4))
                    ]
                ),
                token: token
            )
            #expect(revived.results.first?.version == 3)
            records = try await server.pullAll(token: token)
            #expect(records["events/e-1"]?.op == .upsert)
            #expect(records["events/e-1"]?.version == 3)
        }
    }

    @Test(
        "a resent mutation whose result is no longer kept is a duplicate: no version claimed, the record as it is now",
        arguments: StorageBackend.allCases
    )
    func duplicateBeyondRecentResults(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let upsert = PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(1))])
            _ = try await server.pushOK(upsert, token: token)
            // Two later pushes of the client: the server keeps the results of the last two only.
            _ = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 2, entity: "e", entityID: "y", data: .value(2))]),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 3, entity: "e", entityID: "y", data: .value(3))]),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "c2", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(9))]),
                token: token
            )
            let reply = try await server.push(upsert, token: token)
            let text = String(decoding: reply.body, as: UTF8.self)
            #expect(text.contains("\"version\":null"))
            let result = try #require(try reply.decode(PushResponse.self).results.first)
            #expect(result.status == .duplicate)
            #expect(result.entityID == "x")
            #expect(result.current?.withoutChangedAt == RecordState(version: 2, deleted: false, data: .value(9)))

            _ = try await server.pushOK(PushRequest(clientID: "c2", mutations: [.delete(id: 2, entity: "e", entityID: "x")]), token: token)
            let afterDelete = try #require(try await server.pushOK(upsert, token: token).results.first)
            #expect(afterDelete.status == .duplicate)
            #expect(afterDelete.current?.withoutChangedAt == RecordState(version: 3, deleted: true, data: nil))
            #expect(try await server.pullAll(token: token)["e/x"]?.op == .delete)
        }
    }

    @Test(
        "answers lost three times while new changes join each resend: the first mutation still learns its own result",
        arguments: StorageBackend.allCases
    )
    func resendsWithNewChanges(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            var mutations: [Mutation] = []
            var first: PushResult?
            for round in 1...4 {
                mutations.append(.upsert(id: Int64(round), entity: "events", entityID: "e-\(round)", data: .value(Int64(round))))
                let response = try await server.pushOK(PushRequest(clientID: "c1", mutations: mutations), token: token)
                if round == 1 { first = response.results.first }
                #expect(response.results.first == first, "round \(round)")
                #expect(response.results.map(\.version) == Array(repeating: 1, count: round))
            }
        }
    }

    @Test(
        "a delete with baseVersion conflicts when the record changed since, and applies when it did not; older clients' deletes without it still win",
        arguments: StorageBackend.allCases
    )
    func conflictCheckedDelete(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "a", data: .value(1)),
                        .upsert(id: 2, entity: "notes", entityID: "a", data: .value(2)),
                        .upsert(id: 3, entity: "notes", entityID: "b", data: .value(1)),
                    ]
                ),
                token: token
            )
            var stale = Mutation.delete(id: 1, entity: "notes", entityID: "a")
            stale.baseVersion = 1
            var current = Mutation.delete(id: 2, entity: "notes", entityID: "b")
            current.baseVersion = 1
            var missing = Mutation.delete(id: 3, entity: "notes", entityID: "never")
            missing.baseVersion = 0
            let answer = try await server.pushOK(PushRequest(clientID: "c2", mutations: [stale, current, missing]), token: token)
            #expect(answer.results.map(\.status) == [.conflict, .applied, .applied])
            #expect(answer.results[0].current?.data == .value(2))
            #expect(answer.results[0].version == 2)
            #expect(answer.results[1].version == 2)
            let records = try await server.pullAll(token: token)
            #expect(records["notes/a"]?.op == .upsert, "the stale delete changed nothing")
            #expect(records["notes/b"]?.op == .delete)
            let old = try await server.pushOK(
                PushRequest(clientID: "c3", mutations: [.delete(id: 1, entity: "notes", entityID: "a")]),
                token: token
            )
            #expect(old.results.map(\.status) == [.applied])
        }
    }

    @Test(
        "a conflict reports when the record last changed, a delete included: the writer's changedAt, else the server's clock",
        arguments: StorageBackend.allCases
    )
    func conflictReportsChangedAt(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            var edit = Mutation.upsert(id: 1, entity: "notes", entityID: "a", data: .value(1))
            edit.changedAt = 1_700_000_000_000
            var delete = Mutation.delete(id: 2, entity: "notes", entityID: "a")
            delete.changedAt = 1_700_000_005_000
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "watch",
                    mutations: [edit, delete, .upsert(id: 3, entity: "notes", entityID: "b", data: .value(1))]
                ),
                token: token
            )
            let before = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
            let answer = try await server.pushOK(
                PushRequest(
                    clientID: "phone",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: "a", data: .value(2), baseVersion: 1),
                        .upsert(id: 2, entity: "notes", entityID: "b", data: .value(2), baseVersion: 0),
                    ]
                ),
                token: token
            )
            #expect(answer.results.map(\.status) == [.conflict, .conflict])
            #expect(answer.results[0].current == RecordState(version: 2, deleted: true, data: nil, changedAt: 1_700_000_005_000))
            let serverTime = try #require(answer.results[1].current?.changedAt, "a mutation without changedAt takes the server's clock")
            #expect(serverTime > before)
            let negative = try await server.send(
                .POST,
                "/v1/push",
                token: token,
                body: Data(#"{"clientID":"phone","mutations":[{"id":3,"entity":"notes","entityID":"c","op":"delete","changedAt":-1}]}"#.utf8)
            )
            #expect(try negative.decode(PushResponse.self).results.first?.error?.contains("changedAt") == true)
        }
    }

    @Test(
        "a conflict-checked upsert whose natural key another record holds is a conflict naming that record, never a blind merge",
        arguments: StorageBackend.allCases
    )
    func conflictAgainstKeyHolder(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [.upsert(id: 1, entity: "samples", entityID: "p1", data: .value(1), naturalKey: "K")]),
                token: token
            )
            // Base version 1 equals the holder's version by chance: still a conflict.
            for base in [Int64(0), 1] {
                let answer = try await server.pushOK(
                    PushRequest(
                        clientID: "watch-\(base)",
                        mutations: [.upsert(id: 1, entity: "samples", entityID: "w1", data: .value(2), naturalKey: "K", baseVersion: base)]
                    ),
                    token: token
                )
                #expect(answer.results.first?.status == .conflict)
                #expect(answer.results.first?.entityID == "p1")
                #expect(answer.results.first?.current?.data == .value(1))
                #expect(answer.results.first?.current?.naturalKey == "K")
            }
            let records = try await server.pullAll(token: token)
            #expect(records.keys.sorted() == ["samples/p1"])
            #expect(records["samples/p1"]?.version == 1)
        }
    }

    @Test(
        "a mutation id reused for another change (a copied store) is rejected, never answered with the other change's result",
        arguments: StorageBackend.allCases
    )
    func reusedMutationID(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "events", entityID: "A", data: .value(1))]),
                token: token
            )
            let reused = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 1, entity: "events", entityID: "B", data: .value(2))]),
                token: token
            )
            #expect(reused.results.first?.status == .rejected)
            #expect(reused.results.first?.error?.contains("already used mutation id 1") == true)
            #expect(reused.results.first?.code == PushResult.mutationIDReused, "a code the client acts on by itself")
            #expect(reused.results.first?.entityID == nil)
            let records = try await server.pullAll(token: token)
            #expect(records["events/A"]?.data == .value(1))
            #expect(records["events/B"] == nil)
        }
    }

    @Test(
        "a resent duplicate reports the record as it is now every time; a reused id with other data is rejected, and the first change's own resend still learns its result",
        arguments: StorageBackend.allCases
    )
    func keptResultsAreTheFirstChangesOwn(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 5, entity: "events", entityID: "r1", data: .value(1))]),
                token: token
            )
            let withOld = PushRequest(
                clientID: "c1",
                mutations: [
                    .upsert(id: 3, entity: "events", entityID: "r1", data: .value(0)),
                    .upsert(id: 6, entity: "events", entityID: "r2", data: .value(2)),
                ]
            )
            let first = try await server.pushOK(withOld, token: token)
            let again = try await server.pushOK(withOld, token: token)
            #expect(first.results[0].status == .duplicate)
            #expect(again.results[0].current?.withoutChangedAt == RecordState(version: 1, deleted: false, data: .value(1)))
            #expect(again == first)

            // The same id, record and op, other data: a copied store's change, not a resend.
            let reused = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 6, entity: "events", entityID: "r2", data: .value(99)),
                        .upsert(id: 7, entity: "events", entityID: "r3", data: .value(3)),
                    ]
                ),
                token: token
            )
            #expect(reused.results.map(\.status) == [.rejected, .applied])
            let genuine = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 6, entity: "events", entityID: "r2", data: .value(2))]),
                token: token
            )
            #expect(genuine.results.first == first.results[1])
            #expect(try await server.pullAll(token: token)["events/r2"]?.data == .value(2))
        }
    }

    @Test(
        "ids and natural keys that differ only in Unicode normalization are different records, as SQLite keeps them",
        arguments: StorageBackend.allCases
    )
    func normalizationIsNotIdentity(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let composed = "caf\u{E9}"
            let decomposed = "cafe\u{301}"
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: composed, data: .value(1), naturalKey: composed),
                        .upsert(id: 2, entity: "events", entityID: decomposed, data: .value(2), naturalKey: decomposed),
                    ]
                ),
                token: token
            )
            #expect(response.results.map(\.status) == [.applied, .applied])
            #expect(response.results.map(\.version) == [1, 1])
            // Counted from the page itself: a Swift dictionary keyed by these ids would merge them.
            let changes = try await server.pullOK(token: token).changes
            #expect(changes.count == 2)
            #expect(changes.map(\.version) == [1, 1])
            #expect(Set(changes.map { Array($0.entityID.utf8) }) == [Array(composed.utf8), Array(decomposed.utf8)])
        }
    }

    @Test("an empty batch is valid and reports the client's lastMutationID", arguments: StorageBackend.allCases)
    func emptyBatch(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            #expect(try await server.pushOK(PushRequest(clientID: "c1", mutations: []), token: token).lastMutationID == 0)
            _ = try await server.pushOK(PushRequest(clientID: "c1", mutations: [.delete(id: 9, entity: "e", entityID: "x")]), token: token)
            #expect(try await server.pushOK(PushRequest(clientID: "c1", mutations: []), token: token).lastMutationID == 9)
        }
    }
}

extension RecordState {
    /// The state without the time of its last change, which a test without a clock of the server's cannot know.
    var withoutChangedAt: RecordState {
        var state = self
        state.changedAt = nil
        return state
    }
}
