import AsyncHTTPClient
import Crypto
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import NIOHTTP1
import Testing

/// The attachment endpoints over real HTTP on both storage engines (PROTOCOL.md,
/// "Attachments"): whole and resumed uploads, reads with and without `Range`, and every refusal
/// changing nothing and revealing nothing.
@Suite("Attachment endpoints")
struct AttachmentEndpointTests {
    static func digest(_ bytes: [UInt8]) -> AttachmentDigest { AttachmentDigest(sha256: SHA256.hash(data: bytes)) }

    static func photo(_ size: Int, seed: Int = 1) -> [UInt8] { (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ seed) } }

    static func upload(
        _ server: TestServer,
        _ method: HTTPMethod,
        _ path: String,
        token: String,
        headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) async throws -> Reply {
        try await server.perform(method, path, headers: [("Authorization", "Bearer \(token)")] + headers, body: body.map { Data($0) })
    }

    @Test(
        "POST /v1/attachments says which of many digests the caller may read, as HEAD would each; another user's bytes stay unknown",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func heldLookup(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            let (alice, bob) = (try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"))
            let photos = (1...3).map { Self.photo(1000, seed: $0) }
            for photo in photos.prefix(2) {
                #expect(try await Self.upload(server, .POST, "/v1/attachments/\(Self.digest(photo))", token: alice, body: photo).status == 201)
            }
            // Half of a third: an upload in progress is not held.
            let partial = try await Self.upload(
                server,
                .POST,
                "/v1/attachments/\(Self.digest(photos[2]))",
                token: alice,
                headers: [("Upload-Draft-Interop-Version", "6"), ("Upload-Complete", "?0")],
                body: Array(photos[2].prefix(500))
            )
            #expect(partial.status == 204)
            let never = Self.digest(Self.photo(10, seed: 9))
            let asked = [Self.digest(photos[1]), never, Self.digest(photos[2]), Self.digest(photos[0]), Self.digest(photos[1])]
            func lookup(_ token: String, _ body: Data) async throws -> Reply {
                try await server.perform(
                    .POST,
                    "/v1/attachments",
                    headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                    body: body
                )
            }
            let answer = try await lookup(alice, try JSONEncoder().encode(HeldAttachmentsRequest(digests: asked)))
            #expect(answer.status == 200)
            #expect(
                try answer.decode(HeldAttachments.self).held == [Self.digest(photos[1]), Self.digest(photos[0])],
                "in the order asked, once each"
            )
            // Bob holds none of Alice's bytes, whoever holds them.
            #expect(try await lookup(bob, try JSONEncoder().encode(HeldAttachmentsRequest(digests: asked))).decode(HeldAttachments.self).held == [])
            // Bad questions are refused, saying what was wrong.
            let tooMany = HeldAttachmentsRequest(digests: Array(repeating: never, count: ProtocolLimits.maxDigestsPerLookup + 1))
            for (body, says) in [
                (Data("{\"digests\": []}".utf8), "1 to 1000"), (try JSONEncoder().encode(tooMany), "1 to 1000"),
                (Data("{\"digests\": [\"sha256:00\"]}".utf8), "digests[0]"), (Data("[1]".utf8), "JSON object"), (Data("{}".utf8), "JSON object"),
            ] {
                let refused = try await lookup(alice, body)
                #expect(refused.status == 400 && refused.errorCode == "bad_request", "\(String(decoding: body.prefix(40), as: UTF8.self))")
                #expect(refused.errorMessage?.contains(says) == true, "\(refused.errorMessage ?? "")")
            }
            #expect(try await server.perform(.POST, "/v1/attachments", headers: [], body: Data("{}".utf8)).status == 401)
        }
    }

    @Test(
        "an upload in one request is readable by its uploader, whole and by range, and by nobody else",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func wholeUpload(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            let (alice, bob) = (try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"))
            let bytes = Self.photo(300_000)
            let path = "/v1/attachments/\(Self.digest(bytes))"
            let created = try await Self.upload(server, .POST, path, token: alice, body: bytes)
            #expect(created.status == 201, "\(created.errorMessage ?? "")")
            let head = try await Self.upload(server, .HEAD, path, token: alice)
            #expect(head.status == 200 && head.headers.first(name: "Content-Length") == "300000")
            let whole = try await Self.upload(server, .GET, path, token: alice)
            #expect(whole.status == 200 && Array(whole.body) == bytes)
            #expect(whole.headers.first(name: "ETag") == "\"\(Self.digest(bytes))\"")
            #expect(whole.headers.first(name: "Cache-Control") == "private, immutable")
            let part = try await Self.upload(server, .GET, path, token: alice, headers: [("Range", "bytes=1000-1999")])
            #expect(part.status == 206 && Array(part.body) == Array(bytes[1000..<2000]))
            #expect(part.headers.first(name: "Content-Range") == "bytes 1000-1999/300000")
            let tail = try await Self.upload(server, .GET, path, token: alice, headers: [("Range", "bytes=-10")])
            #expect(tail.status == 206 && Array(tail.body) == Array(bytes[299_990...]))
            // Found by review: a last byte of 2^63 - 1 overflowed, and the server died.
            let huge = try await Self.upload(server, .GET, path, token: alice, headers: [("Range", "bytes=299990-9223372036854775807")])
            #expect(huge.status == 206 && Array(huge.body) == Array(bytes[299_990...]))
            for range in ["bytes=300000-", "bytes=5-2", "items=0-1", "bytes=0-1,4-5"] {
                let refused = try await Self.upload(server, .GET, path, token: alice, headers: [("Range", range)])
                #expect(refused.status == 416 && refused.errorCode == "range_not_satisfiable", "\(range)")
            }
            // Another user, and a stranger probing digests, learn nothing.
            for method in [HTTPMethod.HEAD, .GET] {
                #expect(try await Self.upload(server, method, path, token: bob).status == 404)
            }
            #expect(try await server.perform(.GET, path, headers: [], body: nil).status == 401)
        }
    }

    @Test(
        "a cut upload goes on from the offset the server holds (interop versions 6 and 3); a wrong offset is refused with the right one",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func resumedUpload(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            let alice = try await TestServer.token(for: "alice")
            for (version, partial, last) in [
                ("6", ("Upload-Complete", "?0"), ("Upload-Complete", "?1")), ("3", ("Upload-Incomplete", "?1"), ("Upload-Incomplete", "?0")),
            ] {
                let bytes = Self.photo(200_000, seed: Int(version)!)
                let path = "/v1/attachments/\(Self.digest(bytes))"
                let draft = ("Upload-Draft-Interop-Version", version)
                let first = try await Self.upload(server, .POST, path, token: alice, headers: [draft, partial], body: Array(bytes[..<80_000]))
                #expect(first.status == 204 && first.headers.first(name: "Upload-Offset") == "80000", "\(first.status) \(first.errorMessage ?? "")")
                #expect(try await Self.upload(server, .HEAD, path, token: alice).status == 404, "not an attachment before it completes")
                let offset = try await Self.upload(server, .HEAD, path + "/upload", token: alice, headers: [draft])
                #expect(offset.status == 204 && offset.headers.first(name: "Upload-Offset") == "80000")
                let partialType = ("Content-Type", "application/partial-upload")
                let wrong = try await Self.upload(
                    server,
                    .PATCH,
                    path + "/upload",
                    token: alice,
                    headers: [draft, last, partialType, ("Upload-Offset", "70000")],
                    body: Array(bytes[70_000...])
                )
                #expect(wrong.status == 409 && wrong.errorCode == "upload_offset_mismatch" && wrong.headers.first(name: "Upload-Offset") == "80000")
                let rest = try await Self.upload(
                    server,
                    .PATCH,
                    path + "/upload",
                    token: alice,
                    headers: [draft, last, partialType, ("Upload-Offset", "80000")],
                    body: Array(bytes[80_000...])
                )
                #expect(rest.status == 201, "\(rest.errorMessage ?? "")")
                #expect(Array(try await Self.upload(server, .GET, path, token: alice).body) == bytes)
            }
        }
    }

    @Test(
        "bytes that do not hash to the digest, a malformed digest, a size past the limit and an unknown interop version are refused, and nothing is kept",
        arguments: StorageBackend.allCases,
        BlobBackend.allCases
    )
    func refusals(backend: StorageBackend, blobs: BlobBackend) async throws {
        try await TestServer.run(backend: backend, blobs: blobs) { server in
            let alice = try await TestServer.token(for: "alice")
            let claimed = Self.digest(Self.photo(10))
            let path = "/v1/attachments/\(claimed)"
            let mismatch = try await Self.upload(server, .POST, path, token: alice, body: Self.photo(11))
            #expect(mismatch.status == 422 && mismatch.errorCode == "digest_mismatch")
            #expect(try await Self.upload(server, .HEAD, path, token: alice).status == 404)
            #expect(try await Self.upload(server, .HEAD, path + "/upload", token: alice).status == 404)
            for bad in ["sha256:ABC", "md5:00", "sha256:" + String(repeating: "0", count: 63)] {
                let refused = try await Self.upload(server, .POST, "/v1/attachments/\(bad)", token: alice, body: [1])
                #expect(refused.status == 400 && refused.errorMessage?.contains("not an attachment digest") == true, "\(bad)")
            }
            let tooLarge = try await Self.upload(server, .POST, path, token: alice, headers: [("Upload-Length", "\(6 << 30)")], body: [1])
            #expect(tooLarge.status == 413 && tooLarge.errorCode == "attachment_too_large")
            // Found by the contract test: an offset near 2^63 plus a length overflowed, and the server died.
            let far = try await Self.upload(
                server,
                .PATCH,
                path + "/upload",
                token: alice,
                headers: [("Upload-Offset", "9223372036854775806")],
                body: Array(repeating: 7, count: 64)
            )
            #expect(far.status == 413 && far.errorCode == "attachment_too_large")
            #expect(try await Self.upload(server, .HEAD, "/v1/attachments/\(claimed)", token: alice).status == 404, "the server still answers")
            let short = try await Self.upload(server, .POST, path, token: alice, headers: [("Upload-Length", "2")], body: Self.photo(10))
            #expect(short.status == 400 && short.errorMessage?.contains("past the 2 bytes this upload announced") == true)
            #expect(try await Self.upload(server, .HEAD, path, token: alice).status == 404)
            let orphan = try await Self.upload(server, .PATCH, path + "/upload", token: alice, headers: [("Upload-Offset", "0")], body: [1])
            #expect(orphan.status == 404, "a PATCH appends to an upload a POST began")
            #expect(try await Self.upload(server, .HEAD, path + "/upload", token: alice).status == 404, "and begins none")
            let version = try await Self.upload(server, .POST, path, token: alice, headers: [("Upload-Draft-Interop-Version", "4")], body: [1])
            #expect(version.status == 400 && version.errorMessage?.contains("3, 5 or 6") == true)
        }
    }
}
