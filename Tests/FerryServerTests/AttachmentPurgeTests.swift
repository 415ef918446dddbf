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
        "the sweep purges what no record references a day after its upload, keeps what one does, and what a tombstone did until it is purged",
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
        #expect(await janitor.sweepOnce(now: tomorrow) == 0, "the tombstone references it until the retention purges it")
        _ = try await storage.purge(before: serverMilliseconds() + 1000)
        #expect(await janitor.sweepOnce(now: tomorrow) == 1)
        #expect(try await blobs.size(of: kept) == nil)
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
}
