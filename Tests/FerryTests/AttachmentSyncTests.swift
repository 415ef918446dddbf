import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// Photos that sync with their records (PROTOCOL.md, "Attachments"), through a real server:
/// uploads before the records that reference them without holding back the others, lazy and
/// eager downloads, cut connections that resume, and files that leave with their rows.
@Suite("Attachments")
struct AttachmentSyncTests {
    static func jobs(space: Bool = false, downloads: SyncedTable.AttachmentDownloads = .lazy) -> SyncedTable {
        SyncedTable(table: "jobs", space: space ? .column("team") : .personal, attachments: ["photo"], attachmentDownloads: downloads)
    }

    static func openStore(_ table: SyncedTable = jobs(), at path: String = ClientFixture.storePath()) throws -> FerryStore {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, title TEXT, photo TEXT, team TEXT);
                    CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
                    """
            )
        }
        return try FerryStore(path: path, schema: migrator, tables: [table, SyncedTable(table: "notes")])
    }

    static func configuration(chunk: Int = 256 * 1024) -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.attachmentChunkBytes = chunk
        return configuration
    }

    /// A photo's bytes in a file of their own.
    static func photo(_ size: Int, seed: UInt8 = 1) throws -> (url: URL, bytes: Data) {
        var generator = SplitMix(seed: UInt64(seed))
        let words = (0..<(size + 7) / 8).map { _ in generator.next() }
        let bytes = words.withUnsafeBytes { Data($0.prefix(size)) }
        let url = TestDirectory.make("photos").appendingPathComponent("photo-\(seed).jpg")
        try bytes.write(to: url)
        return (url, bytes)
    }

    /// A photo of `size` bytes that a first device attached to job `j1` and synced: on the server
    /// with its record, for another device to download.
    static func syncedPhoto(_ size: Int, seed: UInt8, server: TestServer) async throws -> (digest: String, bytes: Data) {
        let field = try openStore()
        let worker = ClientFixture.client(store: field, server: server, configuration: configuration())
        let (url, bytes) = try photo(size, seed: seed)
        let digest = try await field.attach(fileAt: url)
        try await insertJob("j1", photo: digest, in: field)
        try await worker.sync()
        return (digest, bytes)
    }

    static func insertJob(_ id: String, photo: String?, team: String? = nil, in store: FerryStore) async throws {
        try await store.database.write { db in
            try db.execute(sql: "INSERT INTO jobs (id, title, photo, team) VALUES (?, ?, ?, ?)", arguments: [id, "job \(id)", photo, team])
        }
    }

    static func head(_ digest: String, server: TestServer, user: String = "alice") async throws -> Int {
        try await server.send(.HEAD, "/v1/attachments/\(digest)", token: try await TestServer.token(for: user)).status
    }

    @Test("a photo goes up before its record, and another device downloads it only when asked, byte for byte", arguments: BlobBackend.allCases)
    func photoRoundTrip(blobs: BlobBackend) async throws {
        try await TestServer.run(blobs: blobs) { server in
            let field = try Self.openStore()
            let worker = ClientFixture.client(store: field, server: server, configuration: Self.configuration())
            let (url, bytes) = try Self.photo(1_500_000)
            let digest = try await field.attach(fileAt: url, contentType: "image/jpeg")
            #expect(digest.hasPrefix("sha256:") && digest.count == 71)
            try await Self.insertJob("j1", photo: digest, in: field)
            let report = try await worker.sync()
            #expect(report.upload.attachmentsUploaded == 1 && report.upload.acknowledged == 1)
            #expect(try await Self.head(digest, server: server) == 200)

            let office = try Self.openStore()
            let dispatcher = ClientFixture.client(store: office, server: server, configuration: Self.configuration())
            try await dispatcher.sync()
            let photo = try await office.database.read { db in try String.fetchOne(db, sql: "SELECT photo FROM jobs WHERE id = 'j1'") }
            #expect(photo == digest)
            #expect(office.localAttachment(digest) == nil, "lazy: nothing downloaded before it is asked for")
            let file = try await dispatcher.attachment(digest)
            #expect(try Data(contentsOf: file) == bytes)
            #expect(office.localAttachment(digest) == file)
            #expect(try await dispatcher.journal.events().contains { $0.kind == .attachmentDownloaded && $0[.digest] == digest })
            // The same bytes attached again are the same attachment, and nothing is sent again.
            let uploads = {
                try await worker.journal.events().filter {
                    ["POST", "PATCH"].contains($0[.method]) && $0[.path]?.hasPrefix("/v1/attachments/") == true
                }.count
            }
            let before = try await uploads()
            #expect(before == 6, "1.5 MB in chunks of 256 KiB")
            #expect(try await field.attach(fileAt: url) == digest)
            try await Self.insertJob("j2", photo: digest, in: field)
            let again = try await worker.sync()
            #expect(again.upload.attachmentsUploaded == 1 && again.upload.acknowledged == 1)
            #expect(try await uploads() == before)
        }
    }

    @Test("a photo whose upload fails holds back its own record only: the notes queued after it reach the server, and it follows")
    func uploadHoldsBackOnlyItsRecord() async throws {
        try await TestServer.run { server in
            let store = try Self.openStore()
            let broken = LockIsolated(true)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                if broken.value, ["POST", "PATCH"].contains(request.method), request.path.hasPrefix("/v1/attachments/") {
                    throw URLError(.networkConnectionLost)
                }
                return try await next(request)
            }
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: Self.configuration())
            let digest = try await store.attach(fileAt: try Self.photo(600_000).url)
            try await Self.insertJob("j1", photo: digest, in: store)
            try await store.database.write { db in
                for index in 1...20 { try db.execute(sql: "INSERT INTO notes (id, body) VALUES (?, 'text')", arguments: ["n\(index)"]) }
            }
            await #expect(throws: FerryError.self) { try await client.sync() }
            let token = try await TestServer.token(for: "alice")
            var records = try await server.pullAll(token: token)
            #expect(records.keys.filter { $0.hasPrefix("notes/") }.count == 20, "the notes went while the photo could not")
            #expect(records["jobs/j1"] == nil, "no record before its photo")
            #expect(try await client.queueSnapshot().attachments.first?.lastError != nil)

            broken.setValue(false)
            try await client.sync()
            records = try await server.pullAll(token: token)
            #expect(records["jobs/j1"]?.data?["photo"] == .string(digest))
            #expect(try await Self.head(digest, server: server) == 200)
            #expect(try await client.queueSnapshot().attachments.map(\.waitsForUpload) == [false])
        }
    }

    @Test(
        "a connection cut in every upload request and in downloads: each goes on from the bytes the other side holds",
        arguments: BlobBackend.allCases
    )
    func cutConnectionsResume(blobs: BlobBackend) async throws {
        try await TestServer.run(blobs: blobs) { server in
            let size = 2_000_000
            let sent = LockIsolated(0)
            let cuts = LockIsolated(0)
            let tries = LockIsolated(0)
            let real = URLSessionTransport(baseURL: URL(string: server.baseURL)!)
            let cutting = InterceptingTransport(real) { request, next in
                guard ["POST", "PATCH"].contains(request.method), request.path.hasPrefix("/v1/attachments/"), let body = request.body else {
                    return try await next(request)
                }
                // Every other request is cut (the try after a cut starts mid-chunk, from what the server kept).
                let number = tries.withValue { tries in
                    tries += 1
                    return tries
                }
                if number % 2 == 1, cuts.value < 8, body.count > 1 {
                    // The connection dies halfway: the server keeps the half that reached it, the client hears nothing.
                    cuts.withValue { $0 += 1 }
                    var half = request
                    half.body = body.prefix(body.count / 2)
                    half.headers["Upload-Complete"] = "?0"
                    sent.withValue { $0 += body.count / 2 }
                    _ = try await next(half)
                    throw URLError(.networkConnectionLost)
                }
                sent.withValue { $0 += body.count }
                return try await next(request)
            }
            let store = try Self.openStore()
            let client = ClientFixture.client(store: store, server: server, transport: cutting, configuration: Self.configuration())
            let (url, bytes) = try Self.photo(size, seed: 3)
            let digest = try await store.attach(fileAt: url)
            try await Self.insertJob("j1", photo: digest, in: store)
            try await client.sync()
            #expect(cuts.value >= 5, "cut \(cuts.value) times")
            #expect(sent.value <= size * 11 / 10, "bytes sent \(sent.value) for \(size)")
            #expect(try await Self.head(digest, server: server) == 200)

            let received = LockIsolated(0)
            let streamCuts = LockIsolated(0)
            let cuttingDownloads = InterceptingTransport(real) { request, next in
                try await next(request)
            } stream: { request, next in
                let stream = try await next(request)
                guard streamCuts.value < 3 else {
                    return TransportStream(status: stream.status, headers: stream.headers, body: Self.counting(stream.body, into: received))
                }
                streamCuts.withValue { $0 += 1 }
                return TransportStream(
                    status: stream.status,
                    headers: stream.headers,
                    body: Self.cut(stream.body, after: size / 10, counting: received)
                )
            }
            let other = try Self.openStore()
            let reader = ClientFixture.client(store: other, server: server, transport: cuttingDownloads, configuration: Self.configuration())
            try await reader.sync()
            #expect(try Data(contentsOf: try await reader.attachment(digest)) == bytes)
            #expect(streamCuts.value == 3)
            #expect(received.value <= size * 11 / 10, "bytes received \(received.value) for \(size)")
        }
    }

    @Test("an attachment column refuses what is not a digest, in the app's own transaction")
    func columnHoldsDigestsOnly() async throws {
        let store = try Self.openStore()
        for value in ["hello", "sha256:ABC", "SHA256:" + String(repeating: "a", count: 64)] {
            await #expect(throws: DatabaseError.self) { try await Self.insertJob("j1", photo: value, in: store) }
        }
        let queued = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM ferry_outbox WHERE state = 0") }
        #expect(queued == 0)
        await #expect(throws: FerryError.self) { _ = try await store.attach(fileAt: URL(fileURLWithPath: "/nonexistent/photo.jpg")) }
    }

    @Test("a photo whose file is gone, or that the server holds for nobody here, makes its record a dead letter naming it")
    func missingFileIsADeadLetter() async throws {
        try await TestServer.run { server in
            let store = try Self.openStore()
            let client = ClientFixture.client(store: store, server: server, configuration: Self.configuration())
            let digest = try await store.attach(fileAt: try Self.photo(10_000, seed: 5).url)
            try await Self.insertJob("j1", photo: digest, in: store)
            try FileManager.default.removeItem(at: try #require(store.localAttachment(digest)))
            // A digest written without attaching anything: the server holds no such bytes for this user.
            let stranger = "sha256:" + String(repeating: "ab", count: 32)
            try await Self.insertJob("j2", photo: stranger, in: store)
            try await client.sync()
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID).sorted() == ["j1", "j2"])
            #expect(dead.first { $0.entityID == "j1" }?.reason.contains("jobs j1 references attachment \(digest)") == true)
            #expect(dead.first { $0.entityID == "j2" }?.reason.contains(stranger) == true)
        }
    }

    @Test("an eager member gets a shared job's photo with the pull, and loses the file when the space is revoked")
    func eagerDownloadsAndRevocation() async throws {
        try await TestServer.run { server in
            try await server.makeSpace("crew", admin: "alice", members: ["bob": .read])
            let field = try Self.openStore(Self.jobs(space: true))
            let alice = ClientFixture.client(store: field, server: server, configuration: Self.configuration())
            let (url, bytes) = try Self.photo(300_000, seed: 9)
            let digest = try await field.attach(fileAt: url)
            try await Self.insertJob("j1", photo: digest, team: "crew", in: field)
            try await alice.sync()

            let office = try Self.openStore(Self.jobs(space: true, downloads: .eager))
            let bob = ClientFixture.client(store: office, server: server, user: "bob", configuration: Self.configuration())
            try await bob.sync()
            let file = try #require(office.localAttachment(digest), "eager: downloaded with the pull")
            #expect(try Data(contentsOf: file) == bytes)

            #expect(try await server.removeMember("bob", from: "crew", token: try await TestServer.token(for: "alice")).status == 204)
            try await bob.sync()
            #expect(try await office.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM jobs") } == 0)
            #expect(office.localAttachment(digest) == nil && !FileManager.default.fileExists(atPath: file.path))
            await #expect(throws: FerryError.self) { _ = try await bob.attachment(digest) }
        }
    }

    static func counting(_ body: AsyncThrowingStream<Data, any Error>, into total: LockIsolated<Int>) -> AsyncThrowingStream<Data, any Error> {
        cut(body, after: .max, counting: total)
    }

    /// The body's bytes until `limit` have passed, then a cut connection.
    static func cut(
        _ body: AsyncThrowingStream<Data, any Error>,
        after limit: Int,
        counting total: LockIsolated<Int>
    ) -> AsyncThrowingStream<Data, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var passed = 0
                do {
                    for try await chunk in body {
                        let part = chunk.prefix(max(0, limit - passed))
                        passed += part.count
                        total.withValue { $0 += part.count }
                        if !part.isEmpty { continuation.yield(Data(part)) }
                        if passed >= limit { throw URLError(.networkConnectionLost) }
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

/// A repeatable stream of pseudo-random bytes, so a photo is the same on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
