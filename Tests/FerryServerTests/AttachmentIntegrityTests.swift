import FerryProtocol
import FerryTestSupport
import Foundation
import NIOCore
import Testing

@testable import FerryServer

/// No bytes are ever served under a digest they do not hash to (issue 50): whatever a user sends
/// to which process and when, a completion names only bytes it hashed; wrong bytes a store holds
/// anyway are taken aside when a read finds them, and the next true upload writes them anew.
@Suite("Attachment integrity")
struct AttachmentIntegrityTests {
    static let mebibyte = 1024 * 1024

    /// Chunks that arrive only when the test says, telling it when their reader first asks (it is
    /// past its offset check then).
    struct HeldChunks: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let asked: AsyncStream<Void>.Continuation
        let chunks: AsyncStream<ByteBuffer>

        struct AsyncIterator: AsyncIteratorProtocol {
            let asked: AsyncStream<Void>.Continuation
            var base: AsyncStream<ByteBuffer>.Iterator
            mutating func next() async -> ByteBuffer? {
                asked.yield()
                return await base.next()
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(asked: asked, base: chunks.makeAsyncIterator()) }
    }

    /// Puts `bytes` under `digest`'s name as a faulty store would, without hashing them.
    static func plant(_ bytes: [UInt8], as digest: AttachmentDigest, in store: any BlobStore) async throws {
        switch store {
        case let s3 as S3BlobStore:
            _ = try await s3.client.put(s3.prefix + "attachments/" + digest.hex, ByteBuffer(bytes: bytes))
        case let file as FileBlobStore:
            let path = file.path(of: digest)
            try FileManager.default.createDirectory(atPath: path.removingLastComponent().string, withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: path.string))
        default:
            throw TestFailure("no way to plant bytes in \(type(of: store))")
        }
    }

    @Test("S3, two processes: an append another process holds open at the last offset never changes what this one completes")
    func appendHeldOpenElsewhere() async throws {
        let (first, second) = try await S3BlobStoreTests.twoProcesses()
        let bytes = S3BlobStoreTests.bytes(13 * Self.mebibyte, seed: 11)
        let digest = FileBlobStoreTests.digest(bytes)
        let upload = UploadID()
        let last = 12 * Self.mebibyte
        _ = try await S3BlobStoreTests.append(bytes, 0..<6 * Self.mebibyte, to: upload, in: first)
        _ = try await S3BlobStoreTests.append(bytes, 6 * Self.mebibyte..<last, to: upload, in: first)
        // The second process opens an append at the last offset and holds it (its offset check passes).
        let (asked, askedContinuation) = AsyncStream<Void>.makeStream()
        let (chunks, feed) = AsyncStream<ByteBuffer>.makeStream()
        let held = Task {
            try await second.append(HeldChunks(asked: askedContinuation, chunks: chunks), to: upload, at: Int64(last), creating: false)
        }
        var askedIterator = asked.makeAsyncIterator()
        _ = await askedIterator.next()
        // The first gets the true last part, then the other's 8 MiB of other bytes land, then the first completes.
        _ = try await S3BlobStoreTests.append(bytes, last..<bytes.count, to: upload, in: first)
        feed.yield(ByteBuffer(bytes: S3BlobStoreTests.bytes(8 * Self.mebibyte, seed: 12)))
        feed.finish()
        _ = try? await held.value
        #expect(try await first.complete(upload, as: digest) == Int64(bytes.count))
        #expect(FileBlobStoreTests.digest(try await S3BlobStoreTests.read(digest, 0..<Int64(bytes.count), from: second)) == digest)
    }

    @Test("wrong bytes a store holds under a digest are replaced by the next upload of the true bytes", arguments: BlobBackend.allCases)
    func trueUploadReplacesWrongBytes(blobs kind: BlobBackend) async throws {
        let store = try await kind.make()
        let bytes = S3BlobStoreTests.bytes(300_000, seed: 13)
        let digest = FileBlobStoreTests.digest(bytes)
        try await Self.plant(S3BlobStoreTests.bytes(300_000, seed: 14), as: digest, in: store)
        let upload = UploadID()
        _ = try await store.append(FileBlobStoreTests.chunks(bytes), to: upload, at: 0)
        #expect(try await store.complete(upload, as: digest) == 300_000)
        #expect(try await S3BlobStoreTests.read(digest, 0..<300_000, from: store) == bytes)
    }

    @Test(
        "a whole read of wrong bytes is cut short and takes them aside; the next true upload serves the true bytes",
        arguments: BlobBackend.allCases
    )
    func readFindsWrongBytes(blobs kind: BlobBackend) async throws {
        let store = try await kind.make()
        try await TestServer.run(attachments: store) { server in
            let alice = try await TestServer.token(for: "alice")
            let bytes = AttachmentEndpointTests.photo(200_000, seed: 15)
            let digest = AttachmentEndpointTests.digest(bytes)
            let path = "/v1/attachments/\(digest)"
            #expect(try await AttachmentEndpointTests.upload(server, .POST, path, token: alice, body: bytes).status == 201)
            try await Self.plant(AttachmentEndpointTests.photo(200_000, seed: 16), as: digest, in: store)

            let poisoned = try? await AttachmentEndpointTests.upload(server, .GET, path, token: alice)
            #expect(poisoned.map { Array($0.body) != bytes && AttachmentEndpointTests.digest(Array($0.body)) != digest } ?? true)
            #expect(try await store.size(of: digest) == nil, "the wrong bytes are still served")
            #expect(try await AttachmentEndpointTests.upload(server, .GET, path, token: alice).status == 404)

            #expect(try await AttachmentEndpointTests.upload(server, .POST, path, token: alice, body: bytes).status == 201)
            let healed = try await AttachmentEndpointTests.upload(server, .GET, path, token: alice)
            #expect(healed.status == 200 && Array(healed.body) == bytes)
        }
    }

    @Test("quarantine leaves true bytes where they are: a completion that replaced the wrong ones meanwhile wins", arguments: BlobBackend.allCases)
    func quarantineKeepsTrueBytes(blobs kind: BlobBackend) async throws {
        let store = try await kind.make()
        let bytes = S3BlobStoreTests.bytes(100_000, seed: 17)
        let digest = FileBlobStoreTests.digest(bytes)
        let upload = UploadID()
        _ = try await store.append(FileBlobStoreTests.chunks(bytes), to: upload, at: 0)
        _ = try await store.complete(upload, as: digest)
        #expect(try await store.quarantine(digest) == false)
        #expect(try await S3BlobStoreTests.read(digest, 0..<100_000, from: store) == bytes)
        try await Self.plant(S3BlobStoreTests.bytes(100_000, seed: 18), as: digest, in: store)
        #expect(try await store.quarantine(digest) == true)
        #expect(try await store.size(of: digest) == nil)
    }
}
