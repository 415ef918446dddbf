import FerryProtocol
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the attachment store from filling (PROTOCOL.md, "Attachments"): every hour, from a
/// minute after the start, it discards uploads untouched for a day, and purges the attachments
/// nobody may read any more: uploaded over a day ago and referenced by no record (a reference a
/// record released, replacing or deleting its photo, holds for a day too).
///
/// The database decides and the bytes follow: an attachment is a candidate only when the purge
/// itself deleted its last upload row or last released reference, so a database restored from a backup never has bytes its
/// records still reference deleted; and the store moves the bytes aside and asks the database
/// again before deleting them, so an upload of the same bytes completing at that moment keeps them.
public struct AttachmentJanitor: Service {
    let storage: any SyncStorage
    let blobs: any BlobStore
    var metrics = ServerMetrics()
    /// How long an upload may go untouched before it is discarded, an unreferenced attachment
    /// kept for its uploader, and a released one for its record's readers.
    var abandonedAfter: Duration = .seconds(86_400)
    var interval: Duration = .seconds(3600)
    let logger: Logger

    /// A janitor of `storage`'s attachments in `blobs`, as `ferry serve` runs one.
    public init(storage: any SyncStorage, blobs: any BlobStore, metrics: ServerMetrics = ServerMetrics(), logger: Logger) {
        (self.storage, self.blobs, self.metrics, self.logger) = (storage, blobs, metrics, logger)
    }

    /// Sweeps every `interval` until the service group shuts down.
    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: min(.seconds(60), interval))
            while !Task.isCancelled {
                await sweepOnce()
                try await Task.sleep(for: interval)
            }
        }
    }

    /// Discards the uploads and purges the attachments abandoned `abandonedAfter` before `now`;
    /// returns how many attachments went.
    @discardableResult
    public func sweepOnce(now: Date = Date()) async -> Int {
        let cutoff = now.addingTimeInterval(-abandonedAfter.seconds)
        do {
            let discarded = try await blobs.discardUploads(untouchedSince: cutoff)
            // Their rows go with them: the quota no longer counts them.
            _ = try await storage.expireOpenUploads(before: Int64((cutoff.timeIntervalSince1970 * 1000).rounded(.down)))
            if discarded > 0 { logger.info("discarded abandoned uploads", metadata: ["uploads": "\(discarded)"]) }
            var purged = 0
            for digest in try await storage.expireAttachmentUploads(before: Int64((cutoff.timeIntervalSince1970 * 1000).rounded(.down))) {
                let storage = self.storage
                // One failure does not stop the others (its bytes stay: a leak, never a loss).
                do {
                    if try await blobs.purge(digest, unless: { try await storage.wantsAttachment(digest) }) { purged += 1 }
                } catch {
                    logger.error("purging an attachment failed; its bytes stay", metadata: ["digest": "\(digest)", "error": "\(error)"])
                }
            }
            metrics.recordPurgedAttachments(purged)
            if purged > 0 { logger.info("purged unreferenced attachments", metadata: ["attachments": "\(purged)"]) }
            return purged
        } catch is CancellationError {
            return 0
        } catch {
            logger.error("sweeping attachments failed; trying again at the next interval", metadata: ["error": "\(error)"])
            return 0
        }
    }
}
