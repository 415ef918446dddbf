import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// Retrying and discarding dead letters: local changes, safe while another process on the
/// store syncs, and never putting an older change over a newer one.
@Suite("Dead letters", .timeLimit(.minutes(1)))
struct DeadLetterTests {
    /// Sets the queued changes of `ids` aside, as a server's rejection would.
    static func setAside(_ ids: [String], in store: FerryStore) async throws {
        try await store.database.write { db in
            for id in ids {
                try db.execute(
                    sql: "UPDATE ferry_outbox SET state = ?, error = 'refused by a test' WHERE entity = 'events' AND entity_id = ? AND state = ?",
                    arguments: [OutboxState.deadLettered.rawValue, id, OutboxState.pending.rawValue]
                )
            }
        }
    }

    @Test(
        "retry queues dead letters again and drops one a later change supersedes, discard drops them: both while another process's push is on the wire"
    )
    func retryAndDiscardBesideASync() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            let app = try ClientFixture.openStore(at: path)
            try await app.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-1', 1), ('e-2', 1), ('e-3', 1)")
            }
            try await Self.setAside(["e-1", "e-2", "e-3"], in: app)
            try await app.database.write { db in
                try db.execute(sql: "UPDATE events SET value = 2 WHERE id = 'e-2'")  // supersedes e-2's dead letter
                for index in 4...20 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1)", arguments: ["e-\(index)"]) }
            }

            // Another process (a widget) on the same file: its push is applied, its answer withheld.
            let widgetStore = try ClientFixture.openStore(at: path)
            let withheld = WithheldAnswerTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let widget = ClientFixture.client(store: widgetStore, server: server, transport: withheld)
            let running = Task { try await widget.sync() }
            await withheld.serverApplied()

            let client = ClientFixture.client(store: app, server: server)
            #expect(try await client.retryDeadLetters() == 2, "e-1 and e-3 again; e-2's is superseded by its later edit")
            #expect(try await client.deadLetters().isEmpty)
            try await Self.setAside(["e-3"], in: app)
            #expect(try await client.discardDeadLetters() == 1)
            #expect(await client.status.deadLettered == 0)

            running.cancel()
            _ = await running.result
            try await client.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["events/e-1"]?.data?["value"] == .integer(1))
            #expect(remote["events/e-2"]?.data?["value"] == .integer(2), "the older dead letter never overwrote the later edit")
            #expect(remote["events/e-3"] == nil, "discarded")
            #expect(remote.count == 19)
            #expect(await client.status.pending == 0)
            let kinds = try await client.journal.events().map(\.kind)
            #expect(kinds.contains(.deadLettersRetried) && kinds.contains(.deadLettersDiscarded))
        }
    }

    @Test("a dead letter goes away once a later change of its record is answered: a retry can never send it over that change")
    func answeredChangeSupersedesDeadLetter() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-1', 1), ('e-2', 1)") }
            try await Self.setAside(["e-1", "e-2"], in: store)
            try await store.database.write { db in try db.execute(sql: "UPDATE events SET value = 2 WHERE id = 'e-1'") }
            try await client.sync()
            #expect(try await client.deadLetters().map(\.entityID) == ["e-2"], "e-1's dead letter is superseded by its answered edit")
            #expect(try await client.retryDeadLetters() == 1)
            try await client.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["events/e-1"]?.data?["value"] == .integer(2))
            #expect(remote["events/e-2"]?.data?["value"] == .integer(1))
        }
    }
}
