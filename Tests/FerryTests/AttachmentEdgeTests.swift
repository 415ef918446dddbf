import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// Attachments where the review of issue 41 broke them: lost answers, replaced photos, refusals
/// no retry changes, two devices or two clients at once, empty files, rows pulled with anything
/// in an attachment column. Each test failed before its fix.
@Suite("Attachments at the edges")
struct AttachmentEdgeTests {
    typealias Sync = AttachmentSyncTests

    /// The body bytes of every upload request in `events` (not the lookup of which are held, `POST /v1/attachments`).
    static func attachmentBodies(_ events: [JournalEvent]) -> Int {
        var total = 0
        for event in events where (event[.path] ?? "").hasPrefix("/v1/attachments/") && ["POST", "PATCH"].contains(event[.method] ?? "") {
            total += event[.bytes].flatMap { Int($0) } ?? 0
        }
        return total
    }

    @Test(
        "an upload whose completing answer is lost is found done, and nothing is sent again (one request or several)",
        arguments: [100_000, 1_000_000]
    )
    func lostCompletion(size: Int) async throws {
        try await TestServer.run { server in
            let lost = LockIsolated(false)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                let response = try await next(request)
                if response.status == 201, !lost.value {
                    lost.setValue(true)
                    throw URLError(.networkConnectionLost)
                }
                return response
            }
            let store = try Sync.openStore()
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: Sync.configuration())
            let digest = try await store.attach(fileAt: try Sync.photo(size, seed: 11).url)
            try await Sync.insertJob("j1", photo: digest, in: store)
            try await client.sync()
            #expect(lost.value)
            #expect(Self.attachmentBodies(try await client.journal.events()) <= size, "no byte sent twice")
            #expect(try await client.deadLetters().isEmpty, "found done, never a dead letter")
            #expect(try await Sync.head(digest, server: server) == 200)
        }
    }

    @Test(
        "20 photos go up in one lookup and a request each; a second device holding them sends none; a server without the lookup is asked a HEAD each",
        arguments: [true, false]
    )
    func photosInFewRequests(serverHasLookup: Bool) async throws {
        try await TestServer.run { server in
            // A server from before the lookup: its router knows no POST /v1/attachments.
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                guard serverHasLookup || request.method != "POST" || request.path != "/v1/attachments" else {
                    return TransportResponse(status: 404, headers: [:], body: Data(#"{"error":{"code":"not_found","message":"no route"}}"#.utf8))
                }
                return try await next(request)
            }
            func requests(_ client: FerryClient) async throws -> (lookups: Int, heads: Int, uploads: Int) {
                let events = try await client.journal.events().filter { $0.kind == .request && ($0[.path] ?? "").hasPrefix("/v1/attachments") }
                return (
                    events.filter { $0[.method] == "POST" && $0[.path] == "/v1/attachments" }.count,
                    events.filter { $0[.method] == "HEAD" }.count,
                    events.filter { ["POST", "PATCH"].contains($0[.method]) && $0[.path] != "/v1/attachments" }.count
                )
            }
            let photos = try (1...20).map { try Sync.photo(10_000, seed: UInt8($0)) }
            var digests: [String] = []
            let phone = try Sync.openStore()
            let first = ClientFixture.client(store: phone, server: server, transport: transport, configuration: Sync.configuration())
            for (index, photo) in photos.enumerated() {
                let digest = try await phone.attach(fileAt: photo.url)
                digests.append(digest)
                try await Sync.insertJob("j\(index)", photo: digest, in: phone)
            }
            let report = try await first.sync()
            #expect(report.upload.attachmentsUploaded == 20 && report.upload.acknowledged == 20)
            let sent = try await requests(first)
            #expect(sent.uploads == 20, "one POST each, whole")
            #expect(serverHasLookup ? sent.lookups == 1 && sent.heads == 0 : sent.heads == 20, "\(sent)")
            for digest in digests { #expect(try await Sync.head(digest, server: server) == 200) }

            // Another device of the same user attaches the same bytes: the lookup finds them all.
            let tablet = try Sync.openStore()
            let second = ClientFixture.client(store: tablet, server: server, transport: transport, configuration: Sync.configuration())
            for (index, photo) in photos.enumerated() {
                try await Sync.insertJob("t\(index)", photo: try await tablet.attach(fileAt: photo.url), in: tablet)
            }
            _ = try await second.sync()
            let again = try await requests(second)
            #expect(again.uploads == 0, "\(again)")
            #expect(serverHasLookup ? again.lookups == 1 && again.heads == 0 : again.heads == 20, "\(again)")
            #expect(try await second.deadLetters().isEmpty)
        }
    }

    @Test("photos' records go up with the photos already sent when a later upload cannot go on (review: they waited for the next run)")
    func recordsOfSentPhotosWhenALaterUploadFails() async throws {
        try await TestServer.run { server in
            let photos = try (1...4).map { try Sync.photo(10_000, seed: UInt8(40 + $0)) }
            let store = try Sync.openStore()
            var digests: [String] = []
            for (index, photo) in photos.enumerated() {
                digests.append(try await store.attach(fileAt: photo.url))
                try await Sync.insertJob("j\(index)", photo: digests[index], in: store)
            }
            // The fourth photo's upload never gets through; the server stays reachable.
            let fourth = digests[3]
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                if request.path.hasPrefix("/v1/attachments/" + fourth) { throw URLError(.networkConnectionLost) }
                return try await next(request)
            }
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: Sync.configuration())
            await #expect(throws: FerryError.self) { _ = try await client.sync() }
            let token = try await TestServer.token(for: "alice")
            let onServer = try await server.pullOK(token: token).changes.map(\.entityID).sorted()
            #expect(onServer == ["j0", "j1", "j2"], "the records of the photos on the server, and not the fourth's")
        }
    }

    @Test("a record whose photo was replaced goes with its new photo; the old one is never sent; one the server refuses for good is a dead letter")
    func replacedAndRefused() async throws {
        try await TestServer.run { server in
            let refusedDigest = LockIsolated("")
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                if request.method == "POST", !refusedDigest.value.isEmpty, request.path.contains(refusedDigest.value) {
                    return TransportResponse(
                        status: 413,
                        headers: [:],
                        body: Data(#"{"error":{"code":"attachment_too_large","message":"too large"}}"#.utf8)
                    )
                }
                return try await next(request)
            }
            let store = try Sync.openStore()
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: Sync.configuration())
            let old = try await store.attach(fileAt: try Sync.photo(300_000, seed: 12).url)
            let new = try await store.attach(fileAt: try Sync.photo(200_000, seed: 13).url)
            let huge = try await store.attach(fileAt: try Sync.photo(100_000, seed: 14).url)
            refusedDigest.setValue(huge)
            try await Sync.insertJob("j1", photo: old, in: store)
            try await store.database.write { db in try db.execute(sql: "UPDATE jobs SET photo = ? WHERE id = 'j1'", arguments: [new]) }
            try await Sync.insertJob("j2", photo: huge, in: store)
            try await client.sync()
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records["jobs/j1"]?.data?["photo"] == .string(new))
            #expect(
                !(try await client.journal.events()).contains { $0[.path]?.contains(old) == true && $0[.method] == "POST" },
                "the replaced photo is never sent"
            )
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["j2"] && dead.first?.reason.contains("cannot be uploaded") == true, "\(dead)")
            #expect(await client.status.pending == 0)
        }
    }

    @Test("two devices of one user upload the same bytes at once: both finish, neither undoes the other")
    func twoDevicesSameBytes() async throws {
        try await TestServer.run { server in
            let (url, _) = try Sync.photo(3_000_000, seed: 15)
            var clients: [FerryClient] = []
            for _ in 0..<2 {
                let store = try Sync.openStore()
                let digest = try await store.attach(fileAt: url)
                try await Sync.insertJob("j-\(clients.count)", photo: digest, in: store)
                clients.append(ClientFixture.client(store: store, server: server, configuration: Sync.configuration()))
            }
            try await withThrowingTaskGroup(of: SyncReport.self) { group in
                for client in clients { group.addTask { try await client.sync() } }
                for try await report in group { #expect(report.upload.acknowledged == 1) }
            }
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records.keys.filter { $0.hasPrefix("jobs/") }.count == 2)
        }
    }

    @Test("downloads come a chunk per request; an empty attachment, one no row references, and two clients asking at once all arrive")
    func downloads() async throws {
        try await TestServer.run { server in
            let field = try Sync.openStore()
            let worker = ClientFixture.client(store: field, server: server, configuration: Sync.configuration())
            let (url, bytes) = try Sync.photo(1_100_000, seed: 16)
            let photo = try await field.attach(fileAt: url)
            let emptyURL = TestDirectory.make("empty").appendingPathComponent("empty.bin")
            try Data().write(to: emptyURL)
            let empty = try await field.attach(fileAt: emptyURL)
            try await Sync.insertJob("j1", photo: photo, in: field)
            try await Sync.insertJob("j2", photo: empty, in: field)
            try await worker.sync()

            // A store that has not pulled: no row references the photo, and it still arrives and stays.
            let path = ClientFixture.storePath()
            let office = try Sync.openStore(at: path)
            let first = ClientFixture.client(store: office, server: server, configuration: Sync.configuration())
            let second = ClientFixture.client(store: office, server: server, configuration: Sync.configuration())
            async let a = first.attachment(photo)
            async let b = second.attachment(photo)
            let (fileA, fileB) = try await (a, b)
            #expect(try Data(contentsOf: fileA) == bytes && fileA == fileB)
            let gets = try await first.journal.events().filter { $0[.method] == "GET" && $0[.path]?.hasPrefix("/v1/attachments") == true }
            #expect(gets.count >= 5, "1.1 MB in ranges of 256 KiB: \(gets.count) requests")
            #expect(try Data(contentsOf: try await first.attachment(empty)).isEmpty)
        }
    }

    @Test("a row pulled with something else in an attachment column stays editable; only a new value there is checked")
    func pulledRowsStayEditable() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [.upsert(id: 1, entity: "jobs", entityID: "j1", data: ["title": .string("old"), "photo": .string("report.pdf")])]
                ),
                token: token
            )
            let store = try Sync.openStore()
            try await ClientFixture.client(store: store, server: server).sync()
            try await store.database.write { db in
                try db.execute(sql: "UPDATE jobs SET title = 'edited' WHERE id = 'j1'")
                try db.execute(
                    sql: """
                        INSERT INTO jobs (id, title, photo) VALUES ('j1', 'upserted', 'report.pdf')
                        ON CONFLICT (id) DO UPDATE SET title = excluded.title, photo = excluded.photo
                        """
                )
            }
            await #expect(throws: DatabaseError.self) {
                try await store.database.write { db in try db.execute(sql: "UPDATE jobs SET photo = 'other.pdf' WHERE id = 'j1'") }
            }
        }
    }

    @Test("a download whose token is refused asks for a new one once and goes on; one refused again says so at once, not after the retry budget")
    func refusedToken() async throws {
        try await TestServer.run { server in
            let field = try AttachmentSyncTests.openStore()
            let alice = ClientFixture.client(store: field, server: server, configuration: AttachmentSyncTests.configuration())
            let (url, bytes) = try AttachmentSyncTests.photo(600_000, seed: 31)
            let digest = try await field.attach(fileAt: url)
            try await AttachmentSyncTests.insertJob("j1", photo: digest, in: field)
            try await alice.sync()

            let good = try await TestServer.token(for: "alice")
            let bad = try await TestServer.token(for: "alice", secret: String(repeating: "w", count: 32))
            // The first token is refused (expired early); the one asked for next is good.
            let tokens = LockIsolated([bad, good])
            let reader = FerryClient(
                store: try AttachmentSyncTests.openStore(),
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: { tokens.withValue { $0.count > 1 ? $0.removeFirst() : $0[0] } },
                configuration: AttachmentSyncTests.configuration()
            )
            #expect(try Data(contentsOf: try await reader.attachment(digest)) == bytes)

            let signedOut = FerryClient(
                store: try AttachmentSyncTests.openStore(),
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                token: { bad },
                configuration: AttachmentSyncTests.configuration()
            )
            let error = await #expect(throws: FerryError.self) { _ = try await signedOut.attachment(digest) }
            #expect(error?.code == .unauthorized, "\(String(describing: error))")
            let gets = try await signedOut.journal.events().filter { $0[.method] == "GET" }.count
            #expect(gets == 2, "a refused token got \(gets) requests")
        }
    }
}
