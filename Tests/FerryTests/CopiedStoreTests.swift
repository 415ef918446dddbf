import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// A store copied to a new phone, or restored from an older backup, keeps the client id and
/// mutation ids of the store it was copied from: it must notice, take a client id of its own,
/// and send every change the server did not acknowledge again, losing nothing and doubling nothing.
@Suite("Copied and restored stores", .timeLimit(.minutes(2)))
struct CopiedStoreTests {
    /// A consistent copy of `store`'s file, as a backup or a device migration makes one.
    static func copy(of store: FerryStore) throws -> String {
        let path = ClientFixture.storePath()
        let target = try DatabaseQueue(path: path)
        try store.database.backup(to: target)
        try target.close()
        return path
    }

    static func insert(_ ids: [String], into store: FerryStore, value: Int = 1) async throws {
        try await store.database.write { db in
            for id in ids { try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES (?, 'steps', ?)", arguments: [id, value]) }
        }
    }

    static func rows(of store: FerryStore) async throws -> [String: Int] {
        try await store.database.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, value FROM events").map { ($0[0] as String, $0[1] as Int) })
        }
    }

    /// A backup taken before `pushesAfterBackup` more pushes of the original is restored, and
    /// the restored store writes: one push leaves the reused ids in the server's kept results
    /// (answered `rejected` as reused), three push them out of it (answered `duplicate`).
    @Test("a store restored from an older backup: its new writes reach the server under a new client id", arguments: [1, 3])
    func restoredFromBackup(pushesAfterBackup: Int) async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.insert(["before"], into: phone)
            try await ClientFixture.client(store: phone, server: server).sync()
            let backup = try Self.copy(of: phone)
            for push in 0..<pushesAfterBackup {
                try await Self.insert((0..<5).map { "old-\(push)-\($0)" }, into: phone)
                try await ClientFixture.client(store: phone, server: server).sync()
            }
            let oldClientID = phone.clientID

            let restored = try ClientFixture.openStore(at: backup)
            #expect(restored.clientID == oldClientID)
            try await Self.insert((0..<8).map { "new-\($0)" }, into: restored, value: 2)
            let client = ClientFixture.client(store: restored, server: server)
            try await client.sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            for index in 0..<8 { #expect(remote["events/new-\(index)"]?.data?["value"] == .integer(2), "new-\(index) reached the server") }
            #expect(remote.count == 1 + 5 * pushesAfterBackup + 8)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "nothing applied twice")
            // The original's writes after the backup went out under the shared id: the restored
            // store must still pull them, never take them for its own.
            let restoredRows = try await Self.rows(of: restored)
            #expect(restoredRows.count == remote.count, "the restored store holds every record: \(restoredRows.keys.sorted())")
            #expect(restored.clientID != oldClientID)
            #expect(try await client.deadLetters().isEmpty)
            #expect(await client.status.pending == 0)
            let local = try await Self.rows(of: restored)
            #expect(local.count == remote.count, "the restored store holds every record: \(local.keys.sorted())")
            #expect(local["new-0"] == 2, "the local edit was not overwritten by another change's state")
            let renewed = try await client.journal.events().filter { $0.kind == .clientRenewed }
            #expect(renewed.count == 1)
            #expect(renewed.first?.message.contains("another store holds client id \(oldClientID)") == true, "\(renewed)")

            // The original keeps syncing (it takes a new id too if the copy used ids it had not used yet).
            try await Self.insert(["old-after"], into: phone)
            try await ClientFixture.client(store: phone, server: server).sync()
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice"))["events/old-after"] != nil)
        }
    }

    @Test("two phones with one copied store both keep writing: every change of both reaches the server once, and both converge")
    func bothKeepWriting() async throws {
        try await TestServer.run { server in
            let old = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.insert(["shared"], into: old)
            try await ClientFixture.client(store: old, server: server).sync()
            let new = try ClientFixture.openStore(at: try Self.copy(of: old))
            let oldClient = ClientFixture.client(store: old, server: server)
            let newClient = ClientFixture.client(store: new, server: server)
            var expected: Set<String> = ["shared"]
            for round in 0..<6 {
                let oldIDs = (0..<(3 + round)).map { "old-\(round)-\($0)" }
                let newIDs = (0..<(7 - round)).map { "new-\(round)-\($0)" }
                try await Self.insert(oldIDs, into: old)
                try await Self.insert(newIDs, into: new)
                expected.formUnion(oldIDs + newIDs)
                // Whoever pushes first takes the ids; the other finds out.
                if round.isMultiple(of: 2) {
                    try await oldClient.sync()
                    try await newClient.sync()
                } else {
                    try await newClient.sync()
                    try await oldClient.sync()
                }
            }
            try await oldClient.sync()
            try await newClient.sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(Set(remote.keys) == Set(expected.map { "events/\($0)" }))
            #expect(remote.values.allSatisfy { $0.version == 1 }, "nothing applied twice")
            #expect(old.clientID != new.clientID)
            #expect(Set(try await Self.rows(of: old).keys) == expected)
            #expect(Set(try await Self.rows(of: new).keys) == expected)
            #expect(await oldClient.status.pending == 0)
            #expect(await newClient.status.pending == 0)
            #expect(try await oldClient.deadLetters().isEmpty)
            #expect(try await newClient.deadLetters().isEmpty)
        }
    }

    @Test(
        "changes the copy sent once into a dead link, whose ids the original then used: answered duplicate, they are no acknowledgement and reach the server"
    )
    func sentBeforeThenTakenByTheOriginal() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.insert(["shared"], into: phone)
            try await ClientFixture.client(store: phone, server: server).sync()
            let copy = try ClientFixture.openStore(at: try Self.copy(of: phone))
            try await Self.insert(["copy-1", "copy-2", "copy-3"], into: copy, value: 2)
            let dead = InterceptingTransport.noPushes(before: URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            await #expect(throws: (any Error).self) {
                try await ClientFixture.client(store: copy, server: server, transport: dead, configuration: LostAnswerTests.givingUp()).sync()
            }
            for round in 0..<4 {  // the original takes the same ids and more, past the server's kept results
                try await Self.insert((0..<3).map { "phone-\(round)-\($0)" }, into: phone)
                try await ClientFixture.client(store: phone, server: server).sync()
            }
            let client = ClientFixture.client(store: copy, server: server)
            try await client.sync()
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            for id in ["copy-1", "copy-2", "copy-3"] { #expect(remote["events/\(id)"]?.data?["value"] == .integer(2), "\(id) reached the server") }
            #expect(remote.count == 1 + 3 + 12)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "nothing applied twice")
            #expect(try await Self.rows(of: copy)["copy-1"] == 2)
            #expect(await client.status.pending == 0)
        }
    }

    @Test("a duplicate answered to a change never sent is not an acknowledgement: the edit stays and reaches the server")
    func duplicateIsNotAnAcknowledgement() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.insert(["r"], into: phone)
            try await ClientFixture.client(store: phone, server: server).sync()
            let backup = try Self.copy(of: phone)
            for value in 2...5 {
                try await phone.database.write { db in try db.execute(sql: "UPDATE events SET value = ? WHERE id = 'r'", arguments: [value]) }
                try await ClientFixture.client(store: phone, server: server).sync()
            }
            let restored = try ClientFixture.openStore(at: backup)
            try await restored.database.write { db in try db.execute(sql: "UPDATE events SET value = 9 WHERE id = 'r'") }
            try await ClientFixture.client(store: restored, server: server).sync()

            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["events/r"]?.data?["value"] == .integer(9))
            #expect(remote["events/r"]?.version == 6)
            #expect(try await Self.rows(of: restored)["r"] == 9)
        }
    }

    /// The copy's first id is above the original's, so nothing tells it the id is shared: the
    /// original's edit under that id must still reach the copy (a pull names the copy's own
    /// answered ids one by one, never a ceiling the original's ids fall under).
    @Test("a copy whose ids pass the original's unnoticed still pulls the original's writes under the shared client id")
    func copyStillPullsTheOriginal() async throws {
        try await TestServer.run { server in
            let original = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await Self.insert(["x"], into: original)
            try await ClientFixture.client(store: original, server: server).sync()
            let copy = try ClientFixture.openStore(at: try Self.copy(of: original))

            try await original.database.write { db in try db.execute(sql: "UPDATE events SET value = 2 WHERE id = 'x'") }
            try await ClientFixture.client(store: original, server: server).sync()
            // Two edits the copy coalesces into one mutation, whose id is above the original's last.
            try await Self.insert(["y"], into: copy)
            try await copy.database.write { db in try db.execute(sql: "UPDATE events SET value = 3 WHERE id = 'y'") }
            try await ClientFixture.client(store: copy, server: server).sync()

            #expect(try await Self.rows(of: copy) == ["x": 2, "y": 3], "the original's edit of x reached the copy")
        }
    }
}
