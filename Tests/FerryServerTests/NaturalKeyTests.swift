import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import FerryServer

/// Natural keys belong to live records only, and no sequence of valid mutations makes the
/// server fail: every mutation gets a result.
@Suite("Natural keys", .timeLimit(.minutes(3)))
struct NaturalKeyTests {
    @Test(
        "upsert Y with key k, delete Y, upsert X with k, upsert Y without a key: every push applied, X keeps k, Y lives without it",
        arguments: StorageBackend.allCases
    )
    func keyLeftOnTombstone(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let steps: [Mutation] = [
                .upsert(id: 1, entity: "events", entityID: "Y", data: .value(1), naturalKey: "k"),
                .delete(id: 2, entity: "events", entityID: "Y"),
                .upsert(id: 3, entity: "events", entityID: "X", data: .value(3), naturalKey: "k"),
                .upsert(id: 4, entity: "events", entityID: "Y", data: .value(4)),
            ]
            for step in steps {
                let response = try await server.pushOK(PushRequest(clientID: "c1", mutations: [step]), token: token)
                #expect(response.results.first?.status == .applied, "\(step.id): \(response)")
            }
            let records = try await server.pullAll(token: token)
            #expect(records["events/X"]?.naturalKey == "k")
            #expect(records["events/Y"]?.op == .upsert)
            #expect(records["events/Y"]?.naturalKey == nil)
            #expect(records["events/Y"]?.data == .value(4))
        }
    }

    @Test(
        "a constraint the rules did not foresee fails one mutation, answered rejected with the reason; the rest of the batch is applied",
        arguments: StorageBackend.allCases
    )
    func constraintFailureIsPerMutation(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "holder", data: .value(1), naturalKey: "k")
                    ]
                ),
                token: token
            )
            // A tombstone still holding the key, as a database from before tombstones gave keys up may have.
            try await server.database.execute(
                """
                INSERT INTO records (user_id, entity, entity_id, version, deleted, natural_key, data, seq)
                VALUES ('alice', 'events', 'old', 2, TRUE, 'k', NULL, 1000000)
                """
            )
            let reply = try await server.push(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 2, entity: "events", entityID: "before", data: .value(2)),
                        .upsert(id: 3, entity: "events", entityID: "old", data: .value(3)),
                        .upsert(id: 4, entity: "events", entityID: "after", data: .value(4)),
                    ]
                ),
                token: token
            )
            #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
            let response = try reply.decode(PushResponse.self)
            #expect(response.results.map(\.status) == [.applied, .rejected, .applied])
            #expect(response.results[1].error?.lowercased().contains("unique") == true, "\(response.results[1])")
            #expect(response.lastMutationID == 4)
            let records = try await server.pullAll(token: token)
            #expect(records["events/before"]?.version == 1)
            #expect(records["events/after"]?.version == 1)
            #expect(records["events/holder"]?.naturalKey == "k")
            // The rejection is spent like any other: resent, it is answered the same.
            let resent = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 3, entity: "events", entityID: "old", data: .value(3))]),
                token: token
            )
            #expect(resent.results.first?.status == .rejected)
        }
    }

    @Test(
        "a natural key given to a record the server has live merges that record into the key's holder and deletes it",
        arguments: StorageBackend.allCases
    )
    func keyGivenToExistingRecord(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "events", entityID: "r1", data: .value(1)),
                        .upsert(id: 2, entity: "events", entityID: "r5", data: .value(5), naturalKey: "k5"),
                    ]
                ),
                token: token
            )
            let response = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 3, entity: "events", entityID: "r1", data: .value(7), naturalKey: "k5")
                    ]
                ),
                token: token
            )
            #expect(response.results.first?.status == .merged)
            #expect(response.results.first?.entityID == "r5")
            let records = try await server.pullAll(token: token)
            #expect(records["events/r1"]?.op == .delete)
            #expect(records["events/r5"]?.data == .value(7))
            #expect(records["events/r5"]?.naturalKey == "k5")
        }
    }

    @Test(
        "2,000 random valid mutations from two clients over a few ids and keys: never a 5xx, one result each, keys unique among live records",
        arguments: StorageBackend.allCases
    )
    func randomSequences(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            var random = SeededGenerator(seed: 20_261_123)
            var nextID: [String: Int64] = ["c1": 0, "c2": 0]
            var sent = 0
            while sent < 2000 {
                let client = random.next() % 2 == 0 ? "c1" : "c2"
                let size = Int(random.next() % 6) + 1
                var mutations: [Mutation] = []
                for _ in 0..<size {
                    nextID[client, default: 0] += 1 + Int64(random.next() % 3)
                    let entityID = "r\(random.next() % 5)"
                    let key: String? = [nil, "k1", "k2", "k3"][Int(random.next() % 4)]
                    if random.next() % 4 == 0 {
                        var delete = Mutation.delete(id: nextID[client]!, entity: "events", entityID: entityID)
                        if random.next() % 3 == 0 { delete.baseVersion = Int64(random.next() % 4) }
                        mutations.append(delete)
                    } else {
                        var mutation = Mutation.upsert(
                            id: nextID[client]!,
                            entity: "events",
                            entityID: entityID,
                            data: .value(Int64(sent)),
                            naturalKey: key
                        )
                        if random.next() % 5 == 0 { mutation.baseVersion = Int64(random.next() % 4) }
                        mutations.append(mutation)
                    }
                }
                // Now and then a batch goes out twice, as after a lost answer.
                let resend = random.next() % 7 == 0
                for _ in 0..<(resend ? 2 : 1) {
                    let reply = try await server.push(PushRequest(clientID: client, mutations: mutations), token: token)
                    try #require(reply.status == 200, "\(mutations): \(String(decoding: reply.body, as: UTF8.self))")
                    #expect(try reply.decode(PushResponse.self).results.count == mutations.count)
                }
                sent += mutations.count
            }
            let live = try await server.pullAll(token: token).values.filter { $0.op == .upsert }
            let keys = live.compactMap(\.naturalKey)
            #expect(Set(keys).count == keys.count, "a natural key held by two live records")
        }
    }
}

@Suite("Durability", .timeLimit(.minutes(1)))
struct DurabilityTests {
    @Test("every connection of the server's SQLite storage syncs each commit to disk (synchronous = FULL): an acknowledged push survives a power cut")
    func synchronousFull() async throws {
        let storage = try SQLiteSyncStorage(path: TestServer.temporaryDatabasePath())
        #expect(try await storage.writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") } == 2)
        #expect(try await storage.writer.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") } == "wal")
        try await storage.close()
    }
}
