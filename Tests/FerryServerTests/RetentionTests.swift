import FerryProtocol
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryServer

/// What the server keeps, and for how long: a pull from scratch needs no tombstone, the
/// retention purges old tombstones and idle clients, and a cursor older than the purge is
/// refused with a code that makes the client start over.
@Suite("Retention", .timeLimit(.minutes(3)))
struct RetentionTests {
    @Test(
        "5,000 records created and deleted: a new device's first pull is one empty page, not 5 pages of tombstones",
        arguments: StorageBackend.allCases
    )
    func freshPullHasNoTombstones(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for batch in 0..<5 {
                let ids = (0..<1000).map { Int64(batch * 2000 + $0 + 1) }
                _ = try await server.pushOK(
                    PushRequest(clientID: "c1", mutations: ids.map { .upsert(id: $0, entity: "e", entityID: "r\($0)", data: .value($0)) }),
                    token: token
                )
                _ = try await server.pushOK(
                    PushRequest(clientID: "c1", mutations: ids.map { .delete(id: $0 + 1000, entity: "e", entityID: "r\($0)") }),
                    token: token
                )
            }
            let first = try await server.pullOK(token: token, limit: 1000)
            #expect(first.changes.isEmpty && !first.hasMore, "\(first.changes.count) changes, hasMore \(first.hasMore)")
            // Its cursor stands at the head: a later change comes, and a later delete as a tombstone.
            _ = try await server.pushOK(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 20_001, entity: "e", entityID: "new", data: .value(1))]),
                token: token
            )
            _ = try await server.pushOK(PushRequest(clientID: "c1", mutations: [.delete(id: 20_002, entity: "e", entityID: "r1")]), token: token)
            let next = try await server.pullOK(token: token, cursor: first.cursor)
            #expect(next.changes.map(\.entityID) == ["new", "r1"] && next.changes.last?.op == .delete)
            // A device that names writes of its own holds records: its first pull brings the tombstones that may delete them.
            let named = try await server.pullOK(token: token, limit: 1000, ownWrites: ("c1", "20001"))
            #expect(named.changes.count == 1000 && named.changes.allSatisfy { $0.op == .delete } && named.hasMore)
        }
    }

    @Test(
        "the retention purges old tombstones and idle clients; an older cursor gets 410 cursor_expired, a newer one goes on, nothing doubles",
        arguments: StorageBackend.allCases
    )
    func purge(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: (1...10).map { .upsert(id: $0, entity: "e", entityID: "r\($0)", data: .value($0)) }),
                token: token
            )
            let old = try await server.pullOK(token: token)  // a device that pulls before the deletes
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: (1...5).map { .delete(id: 10 + $0, entity: "e", entityID: "r\($0)") }),
                token: token
            )
            let recent = try await server.pullOK(token: token, cursor: old.cursor)  // one that pulls after them
            #expect(recent.changes.count == 5)
            _ = try await server.pushOK(
                PushRequest(clientID: "idle", mutations: [.upsert(id: 1, entity: "e", entityID: "w", data: .value(1))]),
                token: token
            )
            // The deletes and the idle client are older than the retention; the phone is not.
            try await server.database.execute("UPDATE records SET written_at = 1000 WHERE deleted")
            try await server.database.execute("UPDATE clients SET last_seen_at = 1000 WHERE client_id = 'idle'")

            let metrics = ServerMetrics()
            let log = CapturedLog()
            let retention = RetentionService(
                storage: server.storage,
                retention: .seconds(30 * 86_400),
                interval: .seconds(3600),
                metrics: metrics,
                logger: log.logger()
            )
            await retention.purgeOnce()
            let line = try #require(log.text.first { $0.contains("purged what the retention lets go") }, "\(log.text)")
            #expect(line.contains("tombstones=5") && line.contains("clients=1"), "\(line)")
            let exposition = String(decoding: metrics.exposition(), as: UTF8.self)
            #expect(exposition.contains("ferry_purged_tombstones_total 5") && exposition.contains("ferry_purged_clients_total 1"), "\(exposition)")

            let expired = try await server.pull(token: token, cursor: old.cursor)
            #expect(expired.status == 410)
            #expect(expired.errorCode == "cursor_expired")
            #expect(expired.errorMessage?.contains("pull from the beginning") == true, "\(expired.errorMessage ?? "")")
            let goesOn = try await server.pullOK(token: token, cursor: recent.cursor)
            #expect(goesOn.changes.map(\.entityID) == ["w"])
            let scratch = try await server.pullOK(token: token, limit: 1000)
            #expect(!scratch.hasMore)
            // A pull from scratch in pages of 2: its cursors stay below the purge horizon, and
            // are accepted all the same (they skip every tombstone up to the head anyway).
            var paged: [String] = []
            var cursor: String?
            repeat {
                let page = try await server.pullOK(token: token, cursor: cursor, limit: 2)
                paged += page.changes.map(\.entityID)
                cursor = page.hasMore ? page.cursor : nil
            } while cursor != nil
            #expect(paged.sorted() == ((6...10).map { "r\($0)" } + ["w"]).sorted(), "every page of a pull from scratch after a purge")
            // A first pull that names writes of its own needs every tombstone: after a purge it starts over instead.
            let named = try await server.pull(token: token, ownWrites: ("phone", "1-15"))
            #expect(named.status == 410 && named.errorCode == "cursor_expired", "\(named.status)")
            #expect(scratch.changes.map(\.entityID).sorted() == ((6...10).map { "r\($0)" } + ["w"]).sorted(), "the live records, once each")
            // The idle client is forgotten, with its kept results: its next push starts afresh.
            let again = try await server.pushOK(
                PushRequest(clientID: "idle", mutations: [.upsert(id: 2, entity: "e", entityID: "w", data: .value(2))]),
                token: token
            )
            #expect(again.results.map(\.status) == [.applied])
            // A second purge finds nothing more.
            #expect(try await server.storage.purge(before: 1000) == PurgeReport())
        }
    }

    @Test(
        "a pull naming answered writes this database never applied (a restore, a forgotten client) is refused with cursor_expired",
        arguments: StorageBackend.allCases
    )
    func answeredBeyondTheServer(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let before = try await server.pullOK(token: token)
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: (1...2).map { .upsert(id: $0, entity: "e", entityID: "r\($0)", data: .value($0)) }),
                token: token
            )
            #expect(try await server.pull(token: token, cursor: before.cursor, ownWrites: ("phone", "1-2")).status == 200)
            let beyond = try await server.pull(token: token, cursor: before.cursor, ownWrites: ("phone", "1-3"))
            #expect(beyond.status == 410 && beyond.errorCode == "cursor_expired")
            #expect(beyond.errorMessage?.contains("never applied writes answered to this client") == true, "\(beyond.errorMessage ?? "")")
            #expect(try await server.pull(token: token, cursor: before.cursor, ownWrites: ("tablet", "1")).status == 410, "a client it does not know")
        }
    }

    @Test(
        "a user may have at most 1,000 client ids: the next new one is refused with 403 too_many_clients and changes nothing",
        arguments: StorageBackend.allCases
    )
    func clientLimit(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for client in 0..<ProtocolLimits.maxClientsPerUser {
                let push = PushRequest(clientID: "c\(client)", mutations: [.upsert(id: 1, entity: "e", entityID: "r", data: .value(Int64(client)))])
                #expect(try await server.push(push, token: token).status == 200)
            }
            let refused = try await server.push(
                PushRequest(clientID: "one-more", mutations: [.upsert(id: 1, entity: "e", entityID: "x", data: .value(1))]),
                token: token
            )
            #expect(refused.status == 403)
            #expect(refused.errorCode == "too_many_clients")
            #expect(refused.errorMessage?.contains("1000 client ids") == true, "\(refused.errorMessage ?? "")")
            #expect(try await server.pullAll(token: token)["e/x"] == nil)
            // A known client goes on, and another user is not affected.
            #expect(
                try await server.push(PushRequest(clientID: "c0", mutations: [.delete(id: 2, entity: "e", entityID: "r")]), token: token).status
                    == 200
            )
            let bob = try await TestServer.token(for: "bob")
            #expect(
                try await server.push(PushRequest(clientID: "one-more", mutations: [.delete(id: 1, entity: "e", entityID: "r")]), token: bob).status
                    == 200
            )
        }
    }

    @Test(
        "a client is new by its row alone: one whose row predates the count of pushes (0 there) is known, not refused at the limit (review of issue 40)",
        arguments: StorageBackend.allCases
    )
    func clientLimitKnowsRowsWithoutPushes(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for client in 0..<ProtocolLimits.maxClientsPerUser {
                let push = PushRequest(clientID: "c\(client)", mutations: [.upsert(id: 1, entity: "e", entityID: "r\(client)", data: .value(1))])
                #expect(try await server.push(push, token: token).status == 200)
            }
            // As a row written before the server counted pushes holds it.
            try await server.database.execute("UPDATE clients SET pushes = 0 WHERE client_id = 'c1'")
            let resent = try await server.push(
                PushRequest(clientID: "c1", mutations: [.upsert(id: 2, entity: "e", entityID: "r1", data: .value(2))]),
                token: token
            )
            #expect(resent.status == 200, "\(resent.errorCode ?? "")")
            #expect(try await server.pullAll(token: token)["e/r1"] != nil)
        }
    }
}
