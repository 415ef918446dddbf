import Ferry
import FerryTesting
import Foundation
import Testing

/// An app's own test of its sync code, written as the FerryTesting article shows it: only
/// `Ferry` and `FerryTesting`, a real server in process, a real store on disk.
@Suite("An app's sync, tested with FerryTesting", .timeLimit(.minutes(1)))
struct AppSyncTests {
    /// The app's synced table and its schema.
    static let events = SyncedTable(table: "events")

    static var schema: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: "CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, title TEXT NOT NULL)")
        }
        return migrator
    }

    @Test("my app survives a lost response and an account switch")
    func lostResponseAndAccountSwitch() async throws {
        try await FerryTestServer.run { server in
            let network = FaultInjectingTransport(server.transport(), faults: .none)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("app-sync-\(UUID())")
            defer { try? FileManager.default.removeItem(at: directory) }
            let session = SyncSession(
                configuration: SessionConfiguration(storeDirectory: directory, tables: [Self.events], schema: Self.schema),
                transport: network,
                token: { user in try await server.token(for: user) },
                clock: VirtualClock()  // retries and settle windows pass at once
            )

            // Alice writes three events; the answer to the push that carries them is lost.
            try await session.signIn("alice")
            network.inject(.lostResponse, intoNext: "/v1/push")
            let alice = try #require(await session.store)
            try await alice.database.write { db in
                for n in 1...3 {
                    try db.execute(sql: "INSERT INTO events (id, title) VALUES (?, ?)", arguments: ["a\(n)", "Alice's event \(n)"])
                }
            }
            try await session.sync()  // returns when the run that carries the three is done
            #expect(network.injectedFaults == ["lost response": 1])
            #expect(await session.status.pending == 0)
            #expect(try await server.records(of: "alice").keys.sorted() == ["events/a1", "events/a2", "events/a3"])  // once each

            // Bob signs in on the same device and writes one event.
            try await session.signIn("bob")
            #expect(await session.userID == "bob")
            let bob = try #require(await session.store)
            try await bob.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, title) VALUES ('b1', 'Bob''s event')")
            }
            try await session.sync()

            // Back to Alice: her store holds her events only, and the server kept both apart.
            try await session.signIn("alice")
            try await session.sync()
            let local = try await session.store!.database.read { db in
                try String.fetchAll(db, sql: "SELECT id FROM events ORDER BY id")
            }
            #expect(local == ["a1", "a2", "a3"])
            #expect(try await server.records(of: "bob").keys.sorted() == ["events/b1"])
            #expect(try await server.records(of: "alice").count == 3)
            try await session.signOut()
        }
    }

    @Test("scripted faults meet the next matching request only, in order; rolled faults repeat by seed")
    func scriptedAndRolledFaults() async throws {
        try await FerryTestServer.run { server in
            let network = FaultInjectingTransport(server.transport(), faults: .none)
            let token = try await server.token(for: "carol")
            let pull = TransportRequest(method: "GET", path: "/v1/pull", headers: ["Authorization": "Bearer \(token)"])
            network.inject(.status(503), intoNext: "/v1/push")
            network.inject(.status(429), intoNext: "/v1/pull")
            network.inject(.reset, intoNext: "/v1/pull")
            #expect(try await network.send(pull).status == 429)
            await #expect(throws: FaultInjectingTransport.ConnectionReset.self) { try await network.send(pull) }
            #expect(try await network.send(pull).status == 200)
            #expect(network.injectedFaults == ["429": 1, "reset": 1])  // the push's 503 still waits

            func rolls(seed: UInt64) async throws -> [Int] {
                let rolled = FaultInjectingTransport(server.transport(), seed: seed)
                var statuses: [Int] = []
                for _ in 0..<40 {
                    do { statuses.append(try await rolled.send(pull).status) } catch { statuses.append(0) }
                }
                return statuses
            }
            let first = try await rolls(seed: 7)
            #expect(try await rolls(seed: 7) == first)
            #expect(Set(first).count > 1)  // some requests failed, some passed
        }
    }

    @Test("the test server stops however the test ends, and refuses tokens it did not sign")
    func serverLifecycle() async throws {
        struct Expected: Error {}
        var stoppedURL: URL?
        await #expect(throws: Expected.self) {
            try await FerryTestServer.run { server in
                stoppedURL = server.baseURL
                throw Expected()
            }
        }
        let url = try #require(stoppedURL)
        await #expect(throws: (any Error).self) {
            _ = try await URLSessionTransport(baseURL: url).send(TransportRequest(method: "GET", path: "/v1/health"))
        }

        try await FerryTestServer.run(secret: "one-secret-of-at-least-thirty-two-bytes!") { server in
            let other = try await FerryTestServer.start(secret: "another-secret-of-at-least-32-bytes!!")
            let foreign = try await other.token(for: "dave")
            try await other.stop()
            let response = try await server.transport().send(
                TransportRequest(method: "GET", path: "/v1/pull", headers: ["Authorization": "Bearer \(foreign)"])
            )
            #expect(response.status == 401)
        }
    }

    @Test("the FerryTesting article shows the first test of this suite, word for word, and imports nothing else")
    func articleShowsThisTest() throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let article = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
                "../../Sources/FerryTesting/FerryTesting.docc/TestingYourAppsSync.md"
            ).standardized,
            encoding: .utf8
        )
        let start = try #require(source.range(of: "    @Test(\"my app survives"))
        let end = try #require(source.range(of: "    @Test(\"scripted faults"))
        let test = source[start.lowerBound..<end.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(article.contains(test))
        #expect(article.contains("import Ferry\nimport FerryTesting\nimport Foundation\nimport Testing\n"))
    }

    @Test(
        "a device taken offline and back, a photo's download cut mid-body, the server's attachments listed, and its janitor a day later, with TestNetwork"
    )
    func offlineCutDownloadAndJanitor() async throws {
        try await FerryTestServer.run { server in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("app-photos-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let jobs = SyncedTable(table: "jobs", attachments: ["photo"])
            var schema = DatabaseMigrator()
            schema.registerMigration("v1") { db in try db.execute(sql: "CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, photo TEXT)") }
            let device = { (name: String) in
                let store = try FerryStore(path: directory.appendingPathComponent("\(name).sqlite").path, schema: schema, tables: [jobs])
                let network = TestNetwork(server.transport())
                let client = FerryClient(store: store, transport: network, token: server.tokenProvider(for: "alice"), clock: VirtualClock())
                return (store, network, client)
            }
            let (phone, phoneNetwork, phoneClient) = try device("phone")
            let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            let file = directory.appendingPathComponent("photo.jpg")
            try bytes.write(to: file)
            let digest = try await phone.attach(fileAt: file, contentType: "image/jpeg")
            try await phone.database.write { db in try db.execute(sql: "INSERT INTO jobs (id, photo) VALUES ('j1', ?)", arguments: [digest]) }
            await phoneNetwork.goOffline()
            await #expect(throws: FerryError.self) { try await phoneClient.sync() }
            await phoneNetwork.goOnline()
            try await phoneClient.sync()

            let (_, deskNetwork, deskClient) = try device("desk")
            try await deskClient.sync()
            await deskNetwork.cutNextDownload(afterBytes: 1000)
            let fetched = try await deskClient.attachment(digest)
            #expect(try Data(contentsOf: fetched) == bytes)
            #expect(fetched.pathExtension == "jpg")
            #expect(await server.sweepAttachments(asOf: Date().addingTimeInterval(2 * 86_400)) == 0, "a record references it")
            let held = try await server.storedAttachments()
            #expect(held.map(\.digest.description) == [digest])
            #expect(held.first?.uploadedBy == ["alice"] && held.first?.contentType == "image/jpeg")
            #expect(held.first?.size == 300_000 && held.first?.bytesStored == 300_000)
            #expect(held.first?.references == [.init(space: nil, user: "alice", entity: "jobs", entityID: "j1", released: false)])

            // The photo taken off the job: released, still on the server for the day, then gone.
            try await phone.database.write { db in try db.execute(sql: "UPDATE jobs SET photo = NULL WHERE id = 'j1'") }
            try await phoneClient.sync()
            #expect(try await server.storedAttachments().first?.references.map(\.released) == [true])
            #expect(await server.sweepAttachments(asOf: Date().addingTimeInterval(2 * 86_400)) == 1)
            #expect(try await server.storedAttachments().isEmpty)
        }
    }
}
