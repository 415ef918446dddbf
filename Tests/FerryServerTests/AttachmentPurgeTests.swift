import FerryProtocol
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryServer

/// What the server forgets of attachments, on both engines (PROTOCOL.md, "Attachments"): bytes
/// nobody may read go with the hourly sweep, bytes a record references never do, and a user's
/// uploads stay within the quota.
@Suite("Attachment purge and quota")
struct AttachmentPurgeTests {
    static func store(_ bytes: [UInt8], by user: String, storage: any SyncStorage, blobs: any BlobStore) async throws -> AttachmentDigest {
        let digest = AttachmentEndpointTests.digest(bytes)
        let upload = UploadID()
        _ = try await blobs.append(FileBlobStoreTests.chunks(bytes), to: upload, at: 0)
        let size = try await blobs.complete(upload, as: digest)
        try await storage.noteUpload(of: digest, size: size, by: user)
        return digest
    }

    @Test(
        "the sweep purges what no record references a day after its upload, keeps what one does, what a deleted record did for a day, and what a restored one takes back",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func purge(backend: StorageBackend, blobs kind: BlobBackend) async throws {
        let database = try await TestDatabase.make(backend)
        let storage = try await database.open()
        let blobs = try await kind.make()
        let janitor = AttachmentJanitor(storage: storage, blobs: blobs, logger: Logger(label: "test"))
        let alice = Caller(userID: "alice", isService: false)
        let loose = try await Self.store(AttachmentEndpointTests.photo(1000, seed: 1), by: "alice", storage: storage, blobs: blobs)
        let kept = try await Self.store(AttachmentEndpointTests.photo(1000, seed: 2), by: "alice", storage: storage, blobs: blobs)
        let job = Mutation(
            id: 1,
            entity: "jobs",
            entityID: "j1",
            op: .upsert,
            data: ["photo": .string(kept.description)],
            attachments: [kept.description]
        )
        _ = try await storage.push(caller: alice, clientID: "c1", mutations: [IncomingMutation(job)])

        #expect(await janitor.sweepOnce() == 0, "within the day, the uploader keeps both")
        let tomorrow = Date().addingTimeInterval(2 * 86_400)
        #expect(await janitor.sweepOnce(now: tomorrow) == 1)
        #expect(try await blobs.size(of: loose) == nil)
        #expect(try await storage.wantsAttachment(loose) == false)
        #expect(try await blobs.size(of: kept) == 1000, "a record references it")

        _ = try await storage.push(caller: alice, clientID: "c1", mutations: [IncomingMutation(.delete(id: 2, entity: "jobs", entityID: "j1"))])
        #expect(await janitor.sweepOnce() == 0, "the deleted record's photo stays readable for a day")
        #expect(try await storage.readableAttachments([kept], by: alice) == [kept])
        // Restored by a client that names no attachments: what the deletion released is the record's again.
        let restore = Mutation(id: 3, entity: "jobs", entityID: "j1", op: .upsert, data: ["photo": .string(kept.description)])
        _ = try await storage.push(caller: alice, clientID: "c1", mutations: [IncomingMutation(restore)])
        #expect(await janitor.sweepOnce(now: tomorrow) == 0, "the restored record references it")
        _ = try await storage.push(caller: alice, clientID: "c1", mutations: [IncomingMutation(.delete(id: 4, entity: "jobs", entityID: "j1"))])
        #expect(await janitor.sweepOnce(now: tomorrow) == 1)
        #expect(try await blobs.size(of: kept) == nil)
        #expect(try await storage.readableAttachments([kept], by: alice).isEmpty)
        try await storage.close()
    }

    @Test("PostgreSQL: a push referencing an upload while the sweep purges it is written with its bytes kept, or refused")
    func pushDuringPurge() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try await database.open()
        let blobs = try await BlobBackend.file.make()
        let janitor = AttachmentJanitor(storage: storage, blobs: blobs, logger: Logger(label: "test"))
        let photo = try await Self.store(AttachmentEndpointTests.photo(1000, seed: 7), by: "alice", storage: storage, blobs: blobs)
        // The push waits, after it found the upload readable and before it commits, until the test lets it go.
        try await database.execute(
            "CREATE FUNCTION hold_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4243); RETURN NEW; END $$"
        )
        try await database.execute("CREATE TRIGGER hold_job BEFORE INSERT ON records FOR EACH ROW EXECUTE FUNCTION hold_job()")
        let job = Mutation(
            id: 1,
            entity: "jobs",
            entityID: "j1",
            op: .upsert,
            data: ["photo": .string(photo.description)],
            attachments: [photo.description]
        )
        try await TestPostgres.withConnection(to: location) { gate in
            _ = try await gate.query("SELECT pg_advisory_lock(4243)", logger: .init(label: "test"))
            let push = Task { try await storage.push(caller: Caller(userID: "alice"), clientID: "c1", mutations: [IncomingMutation(job)]) }
            try await PostgresStorageTests.waitForWaiters(1, on: gate)
            let swept = PostgresStorageTests.Flag()
            let sweep = Task {
                defer { Task { await swept.set() } }
                return await janitor.sweepOnce(now: Date().addingTimeInterval(2 * 86_400))
            }
            // The sweep waits for the push (a second waiter), or, unlocked, has purged already.
            try await PostgresStorageTests.waitForWaiters(2, on: gate, orUntil: { await swept.isSet })
            _ = try await gate.query("SELECT pg_advisory_unlock(4243)", logger: .init(label: "test"))
            let status = try await push.value.results.first?.status
            let purged = await sweep.value
            if status == .applied {
                let size = try await blobs.size(of: photo)
                #expect(purged == 0 && size == 1000, "the record was written and its bytes purged")
            } else {
                #expect(try await storage.wantsAttachment(photo) == false)
            }
        }
        try await storage.close()
    }

    @Test("bytes an upload wants again while they are purged stay", arguments: BlobBackend.allCases)
    func purgeRace(blobs kind: BlobBackend) async throws {
        let blobs = try await kind.make()
        let bytes = AttachmentEndpointTests.photo(5000, seed: 3)
        let digest = AttachmentEndpointTests.digest(bytes)
        let upload = UploadID()
        _ = try await blobs.append(FileBlobStoreTests.chunks(bytes), to: upload, at: 0)
        _ = try await blobs.complete(upload, as: digest)
        #expect(try await blobs.purge(digest, unless: { true }) == false)
        #expect(try await blobs.size(of: digest) == 5000)
        #expect(try await blobs.purge(digest, unless: { false }) == true)
        #expect(try await blobs.size(of: digest) == nil)
        #expect(try await blobs.purge(digest, unless: { false }) == false, "nothing left to purge")
    }

    @Test(
        "an upload past the user's quota is refused 507 with their use, before its body when announced, and nothing is kept",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func quota(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, attachmentQuota: 250_000, blobs: blobs) { server in
            let alice = try await TestServer.token(for: "alice")
            let first = AttachmentEndpointTests.photo(200_000, seed: 4)
            let path = { (bytes: [UInt8]) in "/v1/attachments/\(AttachmentEndpointTests.digest(bytes))" }
            #expect(try await AttachmentEndpointTests.upload(server, .POST, path(first), token: alice, body: first).status == 201)
            // The same bytes again count once.
            #expect(try await AttachmentEndpointTests.upload(server, .POST, path(first), token: alice, body: first).status == 201)
            let second = AttachmentEndpointTests.photo(100_000, seed: 5)
            let announced = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(second),
                token: alice,
                headers: [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "?0"), ("Upload-Length", "100000")],
                body: Array(second[..<1000])
            )
            #expect(announced.status == 507 && announced.errorCode == "quota_exceeded", "\(announced.status)")
            #expect(announced.errorMessage?.contains("200000") == true, "\(announced.errorMessage ?? "")")
            let whole = try await AttachmentEndpointTests.upload(server, .POST, path(second), token: alice, body: second)
            #expect(whole.status == 507)
            #expect(try await AttachmentEndpointTests.upload(server, .HEAD, path(second), token: alice).status == 404)
            // Another user has a quota of their own.
            let bob = try await TestServer.token(for: "bob")
            #expect(try await AttachmentEndpointTests.upload(server, .POST, path(second), token: bob, body: second).status == 201)
        }
    }

    static let draft: [(String, String)] = [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "?0")]

    @Test(
        "uploads in progress count toward the quota and in number: the 507 says the real use, and a cancelled one frees its room",
        arguments: StorageBackend.allCases
    )
    func unfinishedUploadsCount(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, attachmentQuota: 1_000_000) { server in
            let alice = try await TestServer.token(for: "alice")
            let path = { (bytes: [UInt8]) in "/v1/attachments/\(AttachmentEndpointTests.digest(bytes))" }
            let first = AttachmentEndpointTests.photo(1_000_000, seed: 41)
            let started = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(first),
                token: alice,
                headers: Self.draft,
                body: Array(first[..<600_000])
            )
            #expect(started.status == 204)
            let second = AttachmentEndpointTests.photo(600_000, seed: 42)
            let refused = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(second),
                token: alice,
                headers: Self.draft,
                body: Array(second[..<500_000])
            )
            #expect(refused.status == 507 && refused.errorCode == "quota_exceeded")
            #expect(refused.errorMessage?.contains("you use 600000") == true, "\(refused.errorMessage ?? "")")
            // Found by review: a PATCH at offset 0 (409) must not lower what the quota counts.
            let rewound = try await AttachmentEndpointTests.upload(
                server,
                .PATCH,
                path(first) + "/upload",
                token: alice,
                headers: [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "?0"), ("Upload-Offset", "0")],
                body: []
            )
            #expect(rewound.status == 409)
            let still = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(second),
                token: alice,
                headers: Self.draft,
                body: Array(second[..<500_000])
            )
            #expect(still.status == 507 && still.errorMessage?.contains("you use 600000") == true, "\(still.errorMessage ?? "")")
            // Found by review: requests refused before their bytes leave no row behind.
            let garbled = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(second),
                token: alice,
                headers: [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "maybe"), ("Upload-Length", "900000")],
                body: [1]
            )
            #expect(garbled.status == 400)
            #expect(try await server.storage.attachmentUse(of: "alice", excluding: nil).unfinished == 1)
            #expect(try await server.send(.DELETE, path(first) + "/upload", token: alice).status == 204)
            #expect(try await AttachmentEndpointTests.upload(server, .POST, path(second), token: alice, body: second).status == 201)

            // Without a quota, their number is capped: the 33rd unfinished upload is refused.
            let bob = try await TestServer.token(for: "bob")
            for seed in 0..<32 {
                let bytes = AttachmentEndpointTests.photo(2000, seed: 100 + seed)
                let reply = try await AttachmentEndpointTests.upload(
                    server,
                    .POST,
                    path(bytes),
                    token: bob,
                    headers: Self.draft,
                    body: Array(bytes[..<10])
                )
                #expect(reply.status == 204, "upload \(seed): \(reply.status) \(reply.errorMessage ?? "")")
            }
            let extra = AttachmentEndpointTests.photo(2000, seed: 99)
            let capped = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path(extra),
                token: bob,
                headers: Self.draft,
                body: Array(extra[..<10])
            )
            #expect(capped.status == 507 && capped.errorMessage?.contains("32 uploads in progress") == true, "\(capped.errorMessage ?? "")")
        }
    }

    @Test(
        "noting a new upload within the cap counts and notes in one step: ten at once from two processes leave exactly the cap",
        arguments: StorageBackend.allCases
    )
    func capIsAtomic(backend: StorageBackend) async throws {
        let database = try await TestDatabase.make(backend)
        let (one, two) = (try await database.open(), try await database.open())
        let noted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<10 {
                let storage = index % 2 == 0 ? one : two
                let upload = OpenUpload(
                    upload: UploadID(),
                    userID: "alice",
                    digest: AttachmentEndpointTests.digest([UInt8(index)]),
                    length: nil,
                    held: 0
                )
                group.addTask { try await storage.noteOpenUpload(upload, within: 3) }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(noted == 3)
        #expect(try await one.attachmentUse(of: "alice", excluding: nil).unfinished == 3)
        try await one.close()
        try await two.close()
    }

    @Test(
        "the Upload-Length a first request announces holds for the upload's life: a later request may not end it short",
        arguments: StorageBackend.allCases
    )
    func announcedLengthKept(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bytes = AttachmentEndpointTests.photo(800, seed: 43)
            let path = "/v1/attachments/\(AttachmentEndpointTests.digest(bytes))"
            let started = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path,
                token: alice,
                headers: Self.draft + [("Upload-Length", "1000")],
                body: Array(bytes[..<500])
            )
            #expect(started.status == 204)
            let head = try await AttachmentEndpointTests.upload(server, .HEAD, path + "/upload", token: alice)
            #expect(head.headers.first(name: "Upload-Length") == "1000")
            let short = try await AttachmentEndpointTests.upload(
                server,
                .PATCH,
                path + "/upload",
                token: alice,
                headers: [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "?1"), ("Upload-Offset", "500")],
                body: Array(bytes[500...])
            )
            #expect(short.status == 400, "an upload announced as 1000 bytes completed at 800")
            let past = try await AttachmentEndpointTests.upload(
                server,
                .POST,
                path,
                token: alice,
                headers: Self.draft + [("Upload-Length", "100")],
                body: bytes
            )
            #expect(
                past.status == 400 && past.errorMessage?.contains("Content-Length 800 from offset 0 goes past") == true,
                "\(past.errorMessage ?? "")"
            )
            #expect(try await AttachmentEndpointTests.upload(server, .HEAD, path, token: alice).status == 404)
        }
    }

    @Test(
        "an upload whose bytes only a stranger's record references leaves its uploader's quota a day later; the bytes stay for the stranger",
        arguments: StorageBackend.allCases
    )
    func strangersRecordChargesNobodyElse(backend: StorageBackend) async throws {
        let storage = try await TestDatabase.make(backend).open()
        let blobs = try await BlobBackend.file.make()
        let janitor = AttachmentJanitor(storage: storage, blobs: blobs, logger: Logger(label: "test"))
        let bytes = AttachmentEndpointTests.photo(1000, seed: 44)
        let digest = try await Self.store(bytes, by: "alice", storage: storage, blobs: blobs)
        try await storage.noteUpload(of: digest, size: 1000, by: "bob")
        let job = Mutation(
            id: 1,
            entity: "jobs",
            entityID: "b1",
            op: .upsert,
            data: ["photo": .string(digest.description)],
            attachments: [digest.description]
        )
        _ = try await storage.push(caller: Caller(userID: "bob"), clientID: "b", mutations: [IncomingMutation(job)])
        #expect(await janitor.sweepOnce(now: Date().addingTimeInterval(2 * 86_400)) == 0)
        #expect(try await storage.attachmentUse(of: "alice", excluding: nil).kept == 0, "alice dropped the photo; bob's record keeps her charged")
        #expect(try await storage.attachmentUse(of: "bob", excluding: nil).kept == 1000)
        #expect(try await blobs.size(of: digest) == 1000)
        try await storage.close()
    }
}
