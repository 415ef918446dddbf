import Foundation
import Logging
import ServiceLifecycle

/// Discards uploads abandoned for a day (PROTOCOL.md, "Attachments"): a client that never
/// finishes one must not fill the server's disk. Every hour, from a minute after the start.
struct UploadJanitor: Service {
    let blobs: any BlobStore
    /// How long an upload may go untouched before it is discarded.
    var abandonedAfter: Duration = .seconds(86_400)
    var interval: Duration = .seconds(3600)
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: min(.seconds(60), interval))
            while !Task.isCancelled {
                await sweepOnce()
                try await Task.sleep(for: interval)
            }
        }
    }

    /// Discards the uploads untouched since `abandonedAfter` before `now`.
    func sweepOnce(now: Date = Date()) async {
        do {
            let discarded = try await blobs.discardUploads(untouchedSince: now.addingTimeInterval(-abandonedAfter.seconds))
            if discarded > 0 { logger.info("discarded abandoned uploads", metadata: ["uploads": "\(discarded)"]) }
        } catch is CancellationError {
            return
        } catch {
            logger.error("discarding abandoned uploads failed; trying again at the next interval", metadata: ["error": "\(error)"])
        }
    }
}
