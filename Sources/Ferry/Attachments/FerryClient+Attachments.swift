import FerryProtocol
import Foundation

extension FerryClient {
    /// The local file of the attachment `digest` (a column's value), downloaded first if the
    /// store does not hold it: streamed a chunk at a time, resumed from where a cut download
    /// stopped, and named whole only once its bytes hash to `digest`. The file is the store's:
    /// read it, do not move or change it; it stays while a row references it, until the cache
    /// budget (``SyncConfiguration/attachmentCacheBytes``) evicts it after others.
    ///
    /// - Throws: ``FerryError/Code/attachment`` for a value that is not a digest, or one the
    ///   server does not hold for this user; a connection error as a sync does.
    public func attachment(_ digest: String) async throws -> URL {
        guard let parsed = AttachmentDigest(digest) else { throw FerryError.attachment(AttachmentDigest.problem(with: digest)) }
        guard !stopped else { throw Self.stoppedError }
        _ = try await attachmentDownloader.file(of: parsed)
        try await store.evictAttachments(toFit: configuration.attachmentCacheBytes, keeping: parsed)
        guard let info = try await store.attachmentInfo(digest), let file = info.localFile else {
            throw FerryError.attachment("attachment \(digest) left the store's folder as it arrived (evicted or removed meanwhile)")
        }
        return file
    }

    /// Stops the download of `digest` under way, if one is: every caller of
    /// ``attachment(_:)`` waiting for it gets a `CancellationError`. The bytes that arrived stay
    /// in the store's folder, and the next ask goes on from them.
    public func cancelDownload(_ digest: String) async {
        guard let parsed = AttachmentDigest(digest) else { return }
        await downloads.cancel(parsed)
    }
}
