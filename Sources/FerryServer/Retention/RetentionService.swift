import Foundation
import Logging
import ServiceLifecycle

/// Forgets what the retention lets go (`SyncStorage/purge(before:)`): a minute after start (not
/// at once: processes starting together migrate the database first), then every `interval`,
/// until graceful shutdown. Each purge is logged and counted in the metrics; one
/// that fails is logged and tried again at the next interval.
struct RetentionService: Service {
    let storage: any SyncStorage
    let retention: Duration
    let interval: Duration
    let metrics: ServerMetrics
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: min(.seconds(60), interval))
            while !Task.isCancelled {
                await purgeOnce()
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One purge of what was written before now less the retention.
    func purgeOnce(now: Date = Date()) async {
        let cutoff = Int64(((now.timeIntervalSince1970 - retention.seconds) * 1000).rounded(.down))
        do {
            let report = try await storage.purge(before: cutoff)
            metrics.recordPurge(report)
            logger.info(
                "purged what the retention lets go",
                metadata: [
                    "tombstones": "\(report.tombstones)", "users": "\(report.users)", "clients": "\(report.clients)",
                    "retention_days": "\(retention.seconds / 86_400)",
                ]
            )
        } catch is CancellationError {
            return  // shutting down
        } catch {
            logger.error("purging failed; trying again at the next interval", metadata: ["error": "\(error)"])
        }
    }
}
