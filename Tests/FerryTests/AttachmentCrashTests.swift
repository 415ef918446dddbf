import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// Attachments through real kills (SIGKILL, nothing cleaned up) of `ferry client` and of
/// `ferry serve`, and a space revoked while its photo downloads. The server's
/// `ferry_attachment_bytes_total` counts what crossed the wire, so "nothing sent twice whole" is
/// measured, not assumed.
@Suite("Attachments through crashes", .serialized, .timeLimit(.minutes(5)))
struct AttachmentCrashTests {
    static let size = 48 * 1024 * 1024

    static func bytes(_ metrics: ServerMetrics, _ direction: String) -> Int {
        MetricsText.counter("ferry_attachment_bytes_total", labels: #"direction="\#(direction)""#, in: metrics)
    }

    /// A photo of `size` attached in a CLI store and referenced by the job `j1`: its digest and bytes.
    static func attachWithCLI(in store: [String], seed: UInt8) async throws -> (digest: String, bytes: Data) {
        let (photo, original) = try AttachmentSyncTests.photo(Self.size, seed: seed)
        var run = try await FerryProcess.run(["client", "attach"] + store + ["--file", photo.path])
        try #require(run.status == 0, "\(run.error)")
        let digest = run.output.trimmingCharacters(in: .whitespacesAndNewlines)
        run = try await FerryProcess.run(["client", "add"] + store + ["--entity", "jobs", "--id", "j1", "--data", #"{"photo": "\#(digest)"}"#])
        try #require(run.status == 0, "\(run.error)")
        return (digest, original)
    }

    /// Waits until `done()` holds or the process ends; whether it held.
    static func wait(for process: FerryProcess, until done: () throws -> Bool) async throws -> Bool {
        while process.process.isRunning {
            if try done() { return true }
            try await Task.sleep(for: .milliseconds(2))
        }
        return false
    }

    @Test(
        "ferry client sync killed five times mid-upload of a 48 MB photo: each relaunch goes on from the server's offset, and the server got it once"
    )
    func clientKilledMidUpload() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let metrics = ServerMetrics()
        try await TestServer.run(metrics: metrics) { server in
            let directory = TestDirectory.make("upload-kill")
            let store = ["--store", directory.appendingPathComponent("field").path, "--user", "alice"]
            let token = try await TestServer.token(for: "alice")
            let (digest, original) = try await Self.attachWithCLI(in: store, seed: 21)

            let sync = ["client", "sync"] + store + ["--server", server.baseURL, "--token", token]
            var killedMidUpload = 0
            for kill in 1...5 {
                let process = try FerryProcess(sync, in: directory)
                // Kill once the server has received another eighth of the photo.
                if try await Self.wait(for: process, until: { Self.bytes(metrics, "received") >= Self.size * kill / 8 }) { killedMidUpload += 1 }
                await process.killHard()
                let served = try await server.send(.GET, "/v1/attachments/\(digest)", token: token)
                #expect(served.status == 404 || served.body == original, "kill \(kill): a partial upload was served")
            }
            #expect(killedMidUpload >= 3, "only \(killedMidUpload) kills landed during the upload")
            let run = try await FerryProcess.run(sync + ["--json"])
            #expect(run.status == 0 && run.output.contains(#""pending":0"#), "\(run.output) \(run.error)")

            let received = Self.bytes(metrics, "received")
            #expect(received <= Self.size * 11 / 10, "the server received \(received) bytes for a photo of \(Self.size)")
            let served = try await server.send(.GET, "/v1/attachments/\(digest)", token: token)
            #expect(served.status == 200 && served.body == original)
            let records = try await server.pullAll(token: token)
            #expect(records["jobs/j1"]?.data?["photo"] == .string(digest))
        }
    }

    @Test("ferry client fetch killed five times mid-download: no whole-named file is ever partial, and the relaunch goes on from the bytes it holds")
    func clientKilledMidDownload() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let metrics = ServerMetrics()
        try await TestServer.run(metrics: metrics) { server in
            let directory = TestDirectory.make("download-kill")
            let field = ["--store", directory.appendingPathComponent("field").path, "--user", "alice"]
            let office = ["--store", directory.appendingPathComponent("office").path, "--user", "alice"]
            let remote = ["--server", server.baseURL, "--token", try await TestServer.token(for: "alice")]
            let (digest, original) = try await Self.attachWithCLI(in: field, seed: 22)
            var run = try await FerryProcess.run(["client", "sync"] + field + remote)
            try #require(run.status == 0, "\(run.error)")
            run = try await FerryProcess.run(["client", "sync"] + office + remote)
            try #require(run.status == 0, "\(run.error)")

            let officeStore = try StoreLocation.path(forUser: "alice", in: directory.appendingPathComponent("office", isDirectory: true))
            let folder = URL(fileURLWithPath: officeStore.path + ".attachments")
            let whole = folder.appendingPathComponent(String(digest.dropFirst("sha256:".count)))
            let out = directory.appendingPathComponent("fetched.jpg")
            let sentBefore = Self.bytes(metrics, "sent")
            var killedMidDownload = 0
            var kept = 0
            for kill in 1...5 {
                let process = try FerryProcess(["client", "fetch"] + office + remote + ["--out", out.path, digest], in: directory)
                if try await Self.wait(for: process, until: { Self.bytes(metrics, "sent") - sentBefore >= Self.size * kill / 8 }) {
                    killedMidDownload += 1
                }
                await process.killHard()
                if FileManager.default.fileExists(atPath: whole.path) {
                    #expect(try Data(contentsOf: whole) == original, "kill \(kill): a partial file under the attachment's name")
                }
                if FileManager.default.fileExists(atPath: out.path) {
                    #expect(try Data(contentsOf: out) == original, "kill \(kill): a partial --out")
                }
                // One part, never shorter than after the kill before: each relaunch went on from it.
                let parts = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".part") }
                #expect(parts.count <= 1, "kill \(kill): parts \(parts)")
                let size =
                    parts.first.map {
                        (try? FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent($0).path)[.size] as? Int) ?? 0
                    } ?? 0
                #expect(size >= kept || FileManager.default.fileExists(atPath: whole.path), "kill \(kill): the part shrank from \(kept) to \(size)")
                kept = size
            }
            #expect(killedMidDownload >= 3, "only \(killedMidDownload) kills landed during the download")
            try? FileManager.default.removeItem(at: out)
            run = try await FerryProcess.run(["client", "fetch"] + office + remote + ["--out", out.path, digest])
            #expect(run.status == 0, "\(run.error)")
            #expect(try Data(contentsOf: out) == original)
            // A kill loses what was on the wire, at most the chunk a request asks for: never the bytes before it.
            let sent = Self.bytes(metrics, "sent") - sentBefore
            let chunk = SyncConfiguration().attachmentChunkBytes
            #expect(sent <= Self.size + 5 * chunk, "the server sent \(sent) bytes for a photo of \(Self.size), with chunks of \(chunk)")
            let parts = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".part") }
            #expect(parts.isEmpty, "parts left: \(parts)")
        }
    }

    @Test("ferry serve killed three times mid-upload: a half-written attachment is never served, and the upload goes on to the whole photo")
    func serverKilledMidUpload() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        let directory = TestDirectory.make("server-upload-kill")
        let blobs = directory.appendingPathComponent("blobs")
        let serve = { (port: Int) in
            try FerryProcess(
                [
                    "serve", "--database", "sqlite:" + directory.appendingPathComponent("server.sqlite").path, "--port", "\(port)",
                    "--jwt-secret", TestServer.secret, "--rate-limit", "off", "--attachments", "file:" + blobs.path,
                ],
                in: directory
            )
        }
        var server = try serve(0)
        let port = try await server.listeningPort()
        let baseURL = URL(string: "http://127.0.0.1:\(port)")!

        let store = try AttachmentSyncTests.openStore()
        var configuration = AttachmentSyncTests.configuration(chunk: 1024 * 1024)
        configuration.retry = RetryPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(100), maximumAttempts: 100_000)
        let token = try await TestServer.token(for: "alice")
        let client = FerryClient(store: store, transport: URLSessionTransport(baseURL: baseURL), token: { token }, configuration: configuration)
        let (photo, original) = try AttachmentSyncTests.photo(Self.size / 2, seed: 23)
        let digest = try await store.attach(fileAt: photo)
        try await AttachmentSyncTests.insertJob("j1", photo: digest, in: store)
        let uploaded = LockIsolated<Int64>(0)
        let watch = Task {
            for await status in await client.statusUpdates() { uploaded.setValue(status.attachments.bytesUploaded) }
        }
        defer { watch.cancel() }
        let sync = Task { try await client.sync() }

        let probe = URLSessionTransport(baseURL: baseURL)
        for kill in 1...3 {
            while uploaded.value < Int64(Self.size / 2 * kill / 5) { try await Task.sleep(for: .milliseconds(2)) }
            await server.killHard()
            server = try serve(port)
            _ = try await server.listeningPort()
            let served = try await probe.send(
                TransportRequest(method: "GET", path: "/v1/attachments/\(digest)", headers: ["Authorization": "Bearer \(token)"])
            )
            #expect(served.status == 404 || served.body == original, "kill \(kill): \(served.status), \(served.body.count) bytes served")
        }
        let report = try await sync.value
        #expect(report.upload.attachmentsUploaded == 1 && report.upload.acknowledged == 1)
        let served = try await probe.send(
            TransportRequest(method: "GET", path: "/v1/attachments/\(digest)", headers: ["Authorization": "Bearer \(token)"])
        )
        #expect(served.status == 200 && served.body == original)
        let failed = try await client.journal.events().filter { $0.kind == .request && $0.message.contains("failed") }.count
        #expect(failed >= 1, "the kills cut requests")
        await server.killHard()
        try await store.close()
    }

    @Test("a member removed while a shared photo downloads: the download stops, and the device keeps none of its bytes")
    func spaceRevokedMidDownload() async throws {
        try await TestServer.run { server in
            try await server.makeSpace("crew", admin: "alice", members: ["bob": .read])
            let field = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let alice = ClientFixture.client(store: field, server: server, configuration: AttachmentSyncTests.configuration())
            let digest = try await field.attach(fileAt: try AttachmentSyncTests.photo(3_000_000, seed: 24).url)
            try await AttachmentSyncTests.insertJob("j1", photo: digest, team: "crew", in: field)
            try await alice.sync()

            let adminToken = try await TestServer.token(for: "alice")
            let requests = LockIsolated(0)
            let revoking = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                try await next(request)
            } stream: { request, next in
                // The third chunk's request finds Bob removed.
                if requests.withValue({ count in
                    count += 1
                    return count == 3
                }) {
                    #expect(try await server.removeMember("bob", from: "crew", token: adminToken).status == 204)
                }
                return try await next(request)
            }
            let office = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let bob = ClientFixture.client(
                store: office,
                server: server,
                user: "bob",
                transport: revoking,
                configuration: AttachmentSyncTests.configuration()
            )
            try await bob.sync()
            await #expect(throws: FerryError.self) { _ = try await bob.attachment(digest) }
            #expect(requests.value == 3)
            let folder = URL(fileURLWithPath: office.path + ".attachments")
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty, "bytes of the revoked photo stayed")
            try await bob.sync()
            #expect(try await office.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM jobs") } == 0)
        }
    }

    @Test(
        "the object store goes down mid-upload and comes back: the upload waits and goes on, its record waits, the others go, nothing is a dead letter"
    )
    func objectStoreDownAndBack() async throws {
        guard let text = ProcessInfo.processInfo.environment["FERRY_TEST_S3"],
            case .s3(let bucket, let endpoint, let region, _) = try BlobStoreURL(parsing: text),
            let host = endpoint.host, let port = endpoint.port
        else {
            throw TestFailure("this test runs on an S3 store: run it with scripts/test.sh (or scripts/with-s3.sh swift test …)")
        }
        let relay = try await TCPRelay(to: host, port: port)
        let relayed = URL(string: "http://127.0.0.1:\(relay.port)")!
        let store = try #require(
            try await BlobStoreURL.s3(bucket: bucket, endpoint: relayed, region: region, prefix: "test-\(UUID().uuidString.lowercased())/").open()
        )
        try await TestServer.run(attachments: store) { server in
            let appends = LockIsolated(0)
            let real = URLSessionTransport(baseURL: URL(string: server.baseURL)!)
            let transport = InterceptingTransport(real) { request, next in
                if request.method == "PATCH",
                    appends.withValue({ count in
                        count += 1
                        return count == 3
                    })
                {
                    await relay.takeDown()
                }
                return try await next(request)
            }
            var configuration = AttachmentSyncTests.configuration()
            configuration.retry = RetryPolicy(initialDelay: .milliseconds(1), maximumDelay: .milliseconds(5), maximumAttempts: 4)
            let field = try AttachmentSyncTests.openStore()
            let worker = ClientFixture.client(store: field, server: server, transport: transport, configuration: configuration)
            let (url, bytes) = try AttachmentSyncTests.photo(3_000_000, seed: 25)
            let digest = try await field.attach(fileAt: url)
            try await AttachmentSyncTests.insertJob("j1", photo: digest, in: field)
            try await field.database.write { db in
                for index in 1...10 { try db.execute(sql: "INSERT INTO notes (id, body) VALUES (?, 'text')", arguments: ["n\(index)"]) }
            }
            await #expect(throws: FerryError.self) { try await worker.sync() }
            let token = try await TestServer.token(for: "alice")
            var records = try await server.pullAll(token: token)
            #expect(records.keys.filter { $0.hasPrefix("notes/") }.count == 10, "the notes went while the store was down")
            #expect(records["jobs/j1"] == nil)
            #expect(try await worker.deadLetters().isEmpty)
            let waiting = try #require(try await worker.queueSnapshot().attachments.first)
            #expect(waiting.waitsForUpload && waiting.lastError?.contains("503") == true, "\(waiting)")

            relay.bringUp()
            try await worker.sync()
            records = try await server.pullAll(token: token)
            #expect(records["jobs/j1"]?.data?["photo"] == .string(digest))
            #expect(try await worker.deadLetters().isEmpty)

            // A download waits for the store the same way.
            let office = try AttachmentSyncTests.openStore()
            let reader = ClientFixture.client(store: office, server: server, configuration: configuration)
            try await reader.sync()
            await relay.takeDown()
            await #expect(throws: (any Error).self) { _ = try await reader.attachment(digest) }
            #expect(office.localAttachment(digest) == nil)
            relay.bringUp()
            #expect(try Data(contentsOf: try await reader.attachment(digest)) == bytes)
        }
        await relay.close()
    }
}
