import Crypto
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import NIOCore
import Testing

/// The `file:` blob store on a real folder: an attachment appears only whole and hashed to its
/// digest, an upload goes on from the bytes it holds (in this process or after a restart), and
/// reads stream any range.
@Suite("File blob store")
struct FileBlobStoreTests {
    static func chunks(_ bytes: [UInt8], size: Int = 65_536) -> AsyncStream<ByteBuffer> {
        AsyncStream { continuation in
            var start = 0
            while start < bytes.count {
                continuation.yield(ByteBuffer(bytes: bytes[start..<min(bytes.count, start + size)]))
                start += size
            }
            continuation.finish()
        }
    }

    static func digest(_ bytes: [UInt8]) -> AttachmentDigest { AttachmentDigest(sha256: SHA256.hash(data: bytes)) }

    static func read(_ digest: AttachmentDigest, _ range: Range<Int64>, from store: FileBlobStore) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        try await store.read(digest, range: range) { bytes += $0.readableBytesView }
        return bytes
    }

    static func folder() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)").path
    }

    @Test("an upload in one piece becomes its attachment; ranges read back exactly; nothing is visible before it completes")
    func wholeUpload() async throws {
        let store = try await FileBlobStore(folder: Self.folder())
        let bytes = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let digest = Self.digest(bytes)
        let upload = UploadID()
        #expect(try await store.append(Self.chunks(bytes), to: upload, at: 0) == Int64(bytes.count))
        #expect(try await store.size(of: digest) == nil, "an upload is not an attachment until it completes")
        #expect(try await store.complete(upload, as: digest) == Int64(bytes.count))
        #expect(try await store.size(of: digest) == Int64(bytes.count))
        #expect(try await store.offset(of: upload) == nil)
        #expect(try await Self.read(digest, 0..<Int64(bytes.count), from: store) == bytes)
        #expect(try await Self.read(digest, 999_000..<1_000_000, from: store) == Array(bytes[999_000...]))
    }

    @Test("a cut upload goes on from its offset, in another store on the folder (a restarted process), and is hashed from its file")
    func resumedUpload() async throws {
        let folder = Self.folder()
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let upload = UploadID()
        let first = try await FileBlobStore(folder: folder)
        #expect(try await first.append(Self.chunks(Array(bytes[..<120_000])), to: upload, at: 0) == 120_000)
        let second = try await FileBlobStore(folder: folder)
        #expect(try await second.offset(of: upload) == 120_000)
        await #expect(throws: UploadOffsetMismatch.self) {
            _ = try await second.append(Self.chunks(Array(bytes[100_000...])), to: upload, at: 100_000)
        }
        #expect(try await second.offset(of: upload) == 120_000, "a refused append writes nothing")
        await #expect(throws: UploadNotFound.self) {
            _ = try await second.append(Self.chunks(Array(bytes[..<10])), to: UploadID(), at: 0, creating: false)
        }
        #expect(try await second.append(Self.chunks(Array(bytes[120_000...])), to: upload, at: 120_000) == 300_000)
        let digest = Self.digest(bytes)
        #expect(try await second.complete(upload, as: digest) == 300_000)
        #expect(try await Self.read(digest, 0..<300_000, from: first) == bytes)
    }

    @Test("bytes that do not hash to the digest are discarded, and the same bytes twice are one attachment")
    func mismatchAndDuplicates() async throws {
        let store = try await FileBlobStore(folder: Self.folder())
        let bytes = Array("a photo".utf8)
        let wrong = Self.digest(Array("another photo".utf8))
        let upload = UploadID()
        _ = try await store.append(Self.chunks(bytes), to: upload, at: 0)
        await #expect(throws: DigestMismatch.self) { _ = try await store.complete(upload, as: wrong) }
        #expect(try await store.size(of: wrong) == nil)
        #expect(try await store.offset(of: upload) == nil, "the mismatched upload is gone")
        for _ in 0..<2 {
            let again = UploadID()
            _ = try await store.append(Self.chunks(bytes), to: again, at: 0)
            #expect(try await store.complete(again, as: Self.digest(bytes)) == Int64(bytes.count))
        }
        #expect(try await Self.read(Self.digest(bytes), 0..<Int64(bytes.count), from: store) == bytes)
    }

    @Test("a digest is sha256: and 64 lowercase hex digits, nothing else")
    func digestSyntax() {
        let good = "sha256:" + String(repeating: "0a", count: 32)
        #expect(AttachmentDigest(good)?.description == good)
        for bad in [
            "", "sha256:", "SHA256:" + String(repeating: "0a", count: 32), "sha256:" + String(repeating: "0A", count: 32),
            "sha256:" + String(repeating: "0a", count: 31), "sha256:" + String(repeating: "0a", count: 33),
            "md5:" + String(repeating: "0", count: 32),
            "sha256:" + String(repeating: "0g", count: 32),
        ] {
            #expect(AttachmentDigest(bad) == nil, "\(bad)")
        }
    }

    @Test("two uploads of the same bytes completed at once are one attachment, both answered (review: the second rename failed)")
    func sameBytesAtOnce() async throws {
        let store = try await FileBlobStore(folder: Self.folder())
        let bytes = Self.photo(2000)
        for _ in 0..<10 {
            let uploads = [UploadID(), UploadID()]
            for upload in uploads { _ = try await store.append(Self.chunks(bytes), to: upload, at: 0) }
            try await withThrowingTaskGroup(of: Int64.self) { group in
                for upload in uploads { group.addTask { try await store.complete(upload, as: Self.digest(bytes)) } }
                for try await size in group { #expect(size == 2000) }
            }
            for upload in uploads { #expect(try await store.offset(of: upload) == nil, "no upload file is left behind") }
        }
        #expect(try await Self.read(Self.digest(bytes), 0..<2000, from: store) == bytes)
    }

    @Test("uploads untouched for a day are discarded; a fresh one and whole attachments stay")
    func abandonedUploads() async throws {
        let folder = Self.folder()
        let store = try await FileBlobStore(folder: folder)
        let (old, fresh) = (UploadID(), UploadID())
        _ = try await store.append(Self.chunks(Self.photo(100)), to: old, at: 0)
        _ = try await store.append(Self.chunks(Self.photo(50)), to: fresh, at: 0)
        let whole = UploadID()
        _ = try await store.append(Self.chunks(Self.photo(10)), to: whole, at: 0)
        _ = try await store.complete(whole, as: Self.digest(Self.photo(10)))
        let dayAgo = Date().addingTimeInterval(-86_400 - 60)
        try FileManager.default.setAttributes([.modificationDate: dayAgo], ofItemAtPath: "\(folder)/uploads/\(old)")
        #expect(try await store.discardUploads(untouchedSince: Date().addingTimeInterval(-86_400)) == 1)
        #expect(try await store.offset(of: old) == nil)
        #expect(try await store.offset(of: fresh) == 50)
        #expect(try await store.size(of: Self.digest(Self.photo(10))) == 10)
    }

    static func photo(_ size: Int) -> [UInt8] { (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131) } }
}
