import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

/// Who may read an attachment, and which mutations may reference one (PROTOCOL.md,
/// "Attachments"), on both storage engines: an attachment belongs to the spaces of the records
/// that reference it, and a mutation referencing one the caller may not read is `rejected` with
/// `attachment_missing`, so no device ever pulls a record whose attachment it cannot download.
@Suite("Attachment references")
struct AttachmentReferenceTests {
    static func job(_ id: Int64, _ entityID: String, photo: AttachmentDigest?, space: String? = "crew") -> Mutation {
        Mutation(
            id: id,
            entity: "jobs",
            entityID: entityID,
            op: .upsert,
            data: ["title": .string("job \(entityID)"), "photo": photo.map { .string($0.description) } ?? .null],
            space: space,
            attachments: photo.map { [$0.description] } ?? []
        )
    }

    static func read(_ server: TestServer, _ digest: AttachmentDigest, token: String) async throws -> Int {
        try await AttachmentEndpointTests.upload(server, .HEAD, "/v1/attachments/\(digest)", token: token).status
    }

    @Test(
        "a record's attachment is readable by its space's members, by nobody else, and by them while the record lives and a day after it lets go",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func readableThroughRecords(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            try await server.makeSpace("crew", admin: "alice", members: ["bob": .write, "dave": .read])
            let (alice, bob, carol, dave) = (
                try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"), try await TestServer.token(for: "carol"),
                try await TestServer.token(for: "dave")
            )
            let bytes = AttachmentEndpointTests.photo(50_000)
            let photo = AttachmentEndpointTests.digest(bytes)
            #expect(try await AttachmentEndpointTests.upload(server, .POST, "/v1/attachments/\(photo)", token: alice, body: bytes).status == 201)
            // Uploaded, not yet referenced: the uploader alone.
            #expect(try await Self.read(server, photo, token: bob) == 404)
            let first = try await server.pushOK(PushRequest(clientID: "a1", mutations: [Self.job(1, "j1", photo: photo)]), token: alice)
            #expect(first.results[0].status == .applied, "\(first.results[0].error ?? "")")
            for (token, status) in [(alice, 200), (bob, 200), (dave, 200), (carol, 404)] {
                #expect(try await Self.read(server, photo, token: token) == status)
            }
            let whole = try await AttachmentEndpointTests.upload(server, .GET, "/v1/attachments/\(photo)", token: dave)
            #expect(whole.status == 200 && Array(whole.body) == bytes)
            // A member editing the record keeps its photo without ever uploading it.
            var edit = Self.job(1, "j1", photo: photo)
            edit.data?["title"] = .string("done")
            let kept = try await server.pushOK(PushRequest(clientID: "b1", mutations: [edit]), token: bob)
            #expect(kept.results[0].status == .applied, "\(kept.results[0].error ?? "")")
            // A member who leaves reads it no more.
            #expect(try await server.removeMember("dave", from: "crew", token: alice).status == 204)
            #expect(try await Self.read(server, photo, token: dave) == 404)
            // A record that replaces its photo, or is deleted, keeps the old one readable to its
            // readers until the janitor's sweep a day later: a screen may still show it.
            let second = AttachmentEndpointTests.photo(20_000, seed: 9)
            let other = AttachmentEndpointTests.digest(second)
            #expect(try await AttachmentEndpointTests.upload(server, .POST, "/v1/attachments/\(other)", token: alice, body: second).status == 201)
            let moved = try await server.pushOK(
                PushRequest(clientID: "a1", mutations: [Self.job(2, "j1", photo: other), Self.job(3, "j2", photo: photo)]),
                token: alice
            )
            #expect(moved.results.map(\.status) == [.applied, .applied])
            let gone = try await server.pushOK(
                PushRequest(
                    clientID: "a1",
                    mutations: [Self.job(4, "j1", photo: nil), Mutation(id: 5, entity: "jobs", entityID: "j2", op: .delete, space: "crew")]
                ),
                token: alice
            )
            #expect(gone.results.map(\.status) == [.applied, .applied])
            #expect(await server.sweepAttachments(asOf: Date()) == 0)
            let released = { (entityID: String) in
                StoredAttachment.Reference(space: "crew", user: nil, entity: "jobs", entityID: entityID, released: true)
            }
            let listed = try await server.storage.storedAttachments()
            #expect(listed.map(\.digest) == [photo, other].sorted { $0.hex < $1.hex })
            #expect(listed.first { $0.digest == photo }?.references == [released("j1"), released("j2")])
            #expect(listed.first { $0.digest == other }?.references == [released("j1")])
            #expect(listed.allSatisfy { $0.uploadedBy == ["alice"] })
            for (digest, token, status) in [(photo, bob, 200), (other, bob, 200), (photo, dave, 404), (photo, carol, 404)] {
                #expect(try await Self.read(server, digest, token: token) == status, "\(digest) within the day")
            }
            #expect(await server.sweepAttachments(asOf: Date().addingTimeInterval(2 * 86_400)) == 2)
            for (digest, token) in [(photo, bob), (other, bob), (photo, alice), (other, alice)] {
                #expect(try await Self.read(server, digest, token: token) == 404, "\(digest) after the sweep")
            }
            #expect(try await server.attachments.size(of: photo) == nil)
            #expect(try await server.storage.storedAttachments().isEmpty)
        }
    }

    @Test(
        "a mutation referencing an attachment the caller may not read is rejected attachment_missing, and applied once it is uploaded",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func missingAttachment(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            try await server.makeSpace("crew", admin: "alice", members: ["bob": .write])
            let (alice, bob) = (try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"))
            let bytes = AttachmentEndpointTests.photo(10_000, seed: 7)
            let photo = AttachmentEndpointTests.digest(bytes)
            // Bob uploaded the bytes; Alice did not, and no record she can read references them.
            #expect(try await AttachmentEndpointTests.upload(server, .POST, "/v1/attachments/\(photo)", token: bob, body: bytes).status == 201)
            let refused = try await server.pushOK(
                PushRequest(clientID: "a1", mutations: [Self.job(1, "j1", photo: photo), Self.job(2, "j2", photo: nil)]),
                token: alice
            )
            #expect(refused.results[0].status == .rejected && refused.results[0].code == "attachment_missing")
            #expect(refused.results[0].error?.contains(photo.description) == true)
            #expect(refused.results[1].status == .applied, "the batch's other mutations are applied")
            // Resent, the same answer (kept results); nothing was written.
            let again = try await server.pushOK(PushRequest(clientID: "a1", mutations: [Self.job(1, "j1", photo: photo)]), token: alice)
            #expect(again.results[0].code == "attachment_missing")
            #expect(try await server.pullAll(token: bob)["crew:jobs/j1"] == nil)
            #expect(try await Self.read(server, photo, token: alice) == 404, "refusing the mutation revealed nothing")
            // Uploaded by her too (the same bytes: nothing new stored), the change goes under a new id.
            #expect(try await AttachmentEndpointTests.upload(server, .POST, "/v1/attachments/\(photo)", token: alice, body: bytes).status == 201)
            let applied = try await server.pushOK(PushRequest(clientID: "a1", mutations: [Self.job(3, "j1", photo: photo)]), token: alice)
            #expect(applied.results[0].status == .applied)
            // A personal record may reference what a space's record lets the caller read.
            let personal = try await server.pushOK(
                PushRequest(clientID: "b2", mutations: [Self.job(1, "mine", photo: photo, space: nil)]),
                token: bob
            )
            #expect(personal.results[0].status == .applied)
        }
    }

    @Test(
        "attachments that are not digests, too many, or on a delete are rejected with the reason",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func malformedReferences(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            let alice = try await TestServer.token(for: "alice")
            var notDigest = Self.job(1, "j1", photo: nil, space: nil)
            notDigest.attachments = ["sha256:ABC"]
            var tooMany = Self.job(2, "j2", photo: nil, space: nil)
            tooMany.attachments = (0..<65).map { AttachmentEndpointTests.digest([UInt8($0)]).description }
            var onDelete = Mutation.delete(id: 3, entity: "jobs", entityID: "j1")
            onDelete.attachments = []
            let response = try await server.pushOK(PushRequest(clientID: "a1", mutations: [notDigest, tooMany, onDelete]), token: alice)
            #expect(response.results.map(\.status) == [.rejected, .rejected, .rejected])
            #expect(response.results[0].error?.contains("attachments[0]") == true)
            #expect(response.results[1].error?.contains("at most 64") == true)
            #expect(response.results[2].error?.contains("only allowed on an upsert") == true)
            let garbage = try await server.send(
                .POST,
                "/v1/push",
                token: alice,
                body: Data(#"{"clientID":"a1","mutations":[{"id":4,"entity":"jobs","entityID":"x","op":"upsert","data":{},"attachments":[1]}]}"#.utf8)
            )
            #expect(garbage.status == 400 && garbage.errorMessage?.contains("mutations[0].attachments[0]") == true)
        }
    }

    @Test("a server that keeps no attachments refuses for good a mutation naming any, and takes one naming none")
    func attachmentsOff() {
        let photo = AttachmentEndpointTests.digest([1, 2, 3])
        let refused = IncomingMutation(Self.job(1, "j1", photo: photo, space: nil), attachments: false)
        #expect(refused.rejection?.contains("keeps no attachments") == true)
        #expect(IncomingMutation(Self.job(2, "j2", photo: nil, space: nil), attachments: false).rejection == nil)
    }
}
