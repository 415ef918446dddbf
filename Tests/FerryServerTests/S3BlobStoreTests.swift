import FerryProtocol
import FerryTestSupport
import Foundation
import NIOCore
import Testing

@testable import FerryServer

/// The `s3://` blob store on the test SeaweedFS, two instances on one prefix standing for two
/// server processes: the process that wrote an upload's every part completes it by the store's
/// own copy, any other reads it back, and neither is fooled by a part another rewrote.
@Suite("S3 blob store")
struct S3BlobStoreTests {
    static let mebibyte = 1024 * 1024

    /// Two stores on one new prefix of the test bucket.
    static func twoProcesses() async throws -> (S3BlobStore, S3BlobStore) {
        let url = try BlobBackend.s3.url()
        guard let first = try await BlobStoreURL(parsing: url).open() as? S3BlobStore,
            let second = try await BlobStoreURL(parsing: url).open() as? S3BlobStore
        else {
            throw TestFailure("\(url) opened no S3 store")
        }
        return (first, second)
    }

    static func joined(_ store: S3BlobStore) -> Int { store.joinedInStore.withLockedValue { $0 } }

    static func bytes(_ count: Int, seed: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 131) ^ seed) } }

    static func read(_ digest: AttachmentDigest, _ range: Range<Int64>, from store: any BlobStore) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        try await store.read(digest, range: range) { bytes += $0.readableBytesView }
        return bytes
    }

    /// Appends `bytes[range]` as one request.
    static func append(_ bytes: [UInt8], _ range: Range<Int>, to upload: UploadID, in store: any BlobStore) async throws -> Int64 {
        try await store.append(FileBlobStoreTests.chunks(Array(bytes[range])), to: upload, at: Int64(range.lowerBound))
    }

    @Test("appends of 6, 6 and 1 MiB completed by the process that wrote them: the store joins them, and every range reads back exactly")
    func joinedInTheStore() async throws {
        let (store, _) = try await Self.twoProcesses()
        let bytes = Self.bytes(13 * Self.mebibyte, seed: 1)
        let digest = FileBlobStoreTests.digest(bytes)
        let upload = UploadID()
        for range in [0..<6 * Self.mebibyte, 6 * Self.mebibyte..<12 * Self.mebibyte, 12 * Self.mebibyte..<bytes.count] {
            #expect(try await Self.append(bytes, range, to: upload, in: store) == Int64(range.upperBound))
        }
        #expect(try await store.size(of: digest) == nil)
        #expect(try await store.complete(upload, as: digest) == Int64(bytes.count))
        #expect(Self.joined(store) == 1, "the parts were read back, not joined in the store")
        #expect(try await store.offset(of: upload) == nil, "the parts are gone")
        #expect(try await Self.read(digest, 0..<Int64(bytes.count), from: store) == bytes)
        let across = Int64(6 * Self.mebibyte - 10)..<Int64(6 * Self.mebibyte + 10)
        #expect(try await Self.read(digest, across, from: store) == Array(bytes[Int(across.lowerBound)..<Int(across.upperBound)]))

        // Wrong bytes written here whole are refused before anything is named.
        let other = UploadID()
        _ = try await Self.append(Self.bytes(7 * Self.mebibyte, seed: 2), 0..<7 * Self.mebibyte, to: other, in: store)
        let wanted = FileBlobStoreTests.digest(Self.bytes(7 * Self.mebibyte, seed: 3))
        await #expect(throws: DigestMismatch.self) { _ = try await store.complete(other, as: wanted) }
        #expect(Self.joined(store) == 1)
        #expect(try await store.size(of: wanted) == nil)
        #expect(try await store.offset(of: other) == nil)
    }

    @Test("an upload two processes wrote is read back and hashed at completion, whichever completes it")
    func writtenByTwo() async throws {
        let (first, second) = try await Self.twoProcesses()
        let bytes = Self.bytes(13 * Self.mebibyte, seed: 4)
        let digest = FileBlobStoreTests.digest(bytes)
        let upload = UploadID()
        _ = try await Self.append(bytes, 0..<6 * Self.mebibyte, to: upload, in: first)
        _ = try await Self.append(bytes, 6 * Self.mebibyte..<12 * Self.mebibyte, to: upload, in: second)
        // A late append at 6 MiB to the first process, which wrote up to there: the store holds 12 MiB (review).
        await #expect(throws: UploadOffsetMismatch.self) { _ = try await Self.append(bytes, 6 * Self.mebibyte..<bytes.count, to: upload, in: first) }
        #expect(try await first.offset(of: upload) == Int64(12 * Self.mebibyte))
        #expect(try await Self.append(bytes, 12 * Self.mebibyte..<bytes.count, to: upload, in: first) == Int64(bytes.count))
        #expect(try await first.complete(upload, as: digest) == Int64(bytes.count))
        #expect(Self.joined(first) == 0, "parts another process wrote were taken on trust")
        #expect(try await Self.read(digest, 0..<Int64(bytes.count), from: second) == bytes)
    }

    @Test("a part another process rewrote under this one's feet is noticed by its ETag: the bytes are hashed as they stand, and wrong ones refused")
    func partRewrittenElsewhere() async throws {
        let (first, second) = try await Self.twoProcesses()
        let bytes = Self.bytes(7 * Self.mebibyte, seed: 5)
        let digest = FileBlobStoreTests.digest(bytes)
        let upload = UploadID()
        _ = try await Self.append(bytes, 0..<6 * Self.mebibyte, to: upload, in: first)
        // Another process discards the upload and begins it again with other bytes of the same length.
        try await second.discard(upload)
        _ = try await Self.append(Self.bytes(6 * Self.mebibyte, seed: 6), 0..<6 * Self.mebibyte, to: upload, in: second)
        // The first still believes its own bytes are there, appends the rest, and completes.
        _ = try await Self.append(bytes, 6 * Self.mebibyte..<bytes.count, to: upload, in: first)
        await #expect(throws: DigestMismatch.self) { _ = try await first.complete(upload, as: digest) }
        #expect(try await first.size(of: digest) == nil, "bytes that are not the digest's were named as it")
        #expect(Self.joined(first) == 0)
    }

    @Test("S3's XML is read by XMLCoder with its entities: the numeric quotes SeaweedFS writes around an ETag, the named ones, any order")
    func entities() {
        let copied = S3Answers.decode(S3Answers.CopiedPart.self, from: "<CopyPartResult><ETag>&#34;0e51&#34;</ETag></CopyPartResult>")
        #expect(copied?.eTag == "\"0e51\"")
        let listing = S3Answers.decode(
            S3Answers.Listing.self,
            from: """
                <?xml version="1.0" encoding="UTF-8"?>
                <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
                  <Name>b</Name><IsTruncated>true</IsTruncated>
                  <Contents><Size>3</Size><Key>a &amp; b</Key><ETag>&quot;x&quot;</ETag></Contents>
                  <Contents><Key>c&#x22;d</Key><Size>4</Size></Contents>
                  <Contents><Key> spaced </Key><Size>5</Size></Contents>
                  <NextContinuationToken>next</NextContinuationToken>
                </ListBucketResult>
                """
        )
        #expect(listing?.contents?.map(\.key) == ["a & b", "c\"d", " spaced "] && listing?.contents?.map(\.size) == [3, 4, 5])
        #expect(listing?.contents?.first?.eTag == "\"x\"" && listing?.isTruncated == true && listing?.nextContinuationToken == "next")
        let empty = S3Answers.decode(S3Answers.Listing.self, from: "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
        #expect(empty != nil && empty?.contents == nil)
        let failure = S3Answers.failure(in: "<Error><Code>SlowDown</Code><Message>Please &lt;reduce&gt;</Message></Error>")
        #expect(failure.code == "SlowDown" && failure.message == "Please <reduce>")
        #expect(S3Answers.failure(in: "").code == nil)
    }
}
