import FerryServer
import Foundation
import NIOCore

/// The attachment stores the attachment suites run against: every test that takes a
/// `BlobBackend` argument runs once on each, the S3 one against the object store that
/// `scripts/with-s3.sh` started (SeaweedFS), never a mock.
public enum BlobBackend: String, Sendable, CaseIterable, CustomStringConvertible {
    case file
    case s3

    public var description: String { rawValue }

    /// A new, empty store: a folder of its own, or keys under a prefix of their own in the test bucket.
    public func make() async throws -> any BlobStore {
        switch self {
        case .file:
            return try await FileBlobStore(folder: TestDirectory.make("blobs").path)
        case .s3:
            guard let text = ProcessInfo.processInfo.environment["FERRY_TEST_S3"] else {
                throw TestFailure(
                    "this test runs on an S3 store and FERRY_TEST_S3 is not set: run the tests with scripts/test.sh "
                        + "(or scripts/with-s3.sh swift test …), which starts a throwaway SeaweedFS"
                )
            }
            guard case .s3(let bucket, let endpoint, let region, _) = try BlobStoreURL(parsing: text) else {
                throw TestFailure("FERRY_TEST_S3 is not an s3:// URL: \(text)")
            }
            let url = BlobStoreURL.s3(bucket: bucket, endpoint: endpoint, region: region, prefix: "test-\(UUID().uuidString.lowercased())/")
            // The gateway answers before the bucket it creates at start: a few seconds at most.
            var lastError: (any Error)?
            for _ in 0..<30 {
                do {
                    if let store = try await url.open() { return store }
                } catch {
                    lastError = error
                    try await Task.sleep(for: .milliseconds(500))
                }
            }
            throw TestFailure("the test S3 store at \(text) did not open: \(String(describing: lastError))")
        }
    }

    /// The URL `ferry serve --attachments` takes for a store like `make()`'s, with its own
    /// folder or prefix (for tests that run the server as a process).
    public func url() throws -> String {
        switch self {
        case .file:
            return "file:" + TestDirectory.make("blobs").path
        case .s3:
            guard let text = ProcessInfo.processInfo.environment["FERRY_TEST_S3"] else {
                throw TestFailure("FERRY_TEST_S3 is not set: run the tests with scripts/test.sh (or scripts/with-s3.sh swift test …)")
            }
            return text + "&prefix=test-\(UUID().uuidString.lowercased())/"
        }
    }
}

extension BlobStore {
    /// Appends `chunks` to `upload` at `offset`, creating it if new (as a `POST` does).
    public func append<Chunks: AsyncSequence>(_ chunks: Chunks, to upload: UploadID, at offset: Int64) async throws -> Int64
    where Chunks.Element == ByteBuffer {
        try await append(chunks, to: upload, at: offset, creating: true)
    }
}
