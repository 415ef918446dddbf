import FerryProtocol
import Foundation
import Logging
import ServiceLifecycle

/// Delivers the side effects the app's rules asked for (``SideEffectHandler``), after the
/// pushes that asked have committed: it takes what is due from the storage (with several
/// processes, each effect goes to one), hands each to the handler, and marks it done; one that
/// fails is tried again later, after 1 s, 2 s, 4 s … up to an hour. An effect a worker took
/// but never finished (its process killed) is taken again once its lease ends.
struct SideEffectWorker: Service {
    /// The worker's pacing.
    struct Pacing: Sendable {
        /// How long the worker waits when nothing is due.
        var idle: Duration = .seconds(1)
        /// Effects taken at once.
        var batch = 16
        /// How long an effect taken stays the worker's: another process takes it after that.
        var lease: Duration = .seconds(300)
        /// The longest wait before an effect that failed is tried again.
        var maximumBackoff: Duration = .seconds(3600)
    }

    let storage: any SyncStorage
    let handler: any SideEffectHandler
    let metrics: ServerMetrics
    let logger: Logger
    var pacing = Pacing()
    /// The wall clock in milliseconds since 1970, which due times and leases are kept in.
    var now: @Sendable () -> Int64 = { serverMilliseconds() }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                if await deliverDue() == 0 { try await Task.sleep(for: pacing.idle) }
            }
        }
    }

    /// Takes what is due now and delivers it; returns how many effects it took.
    @discardableResult
    func deliverDue() async -> Int {
        let taken: [DeliverableEffect]
        do {
            taken = try await storage.claimSideEffects(limit: pacing.batch, now: now(), lease: Self.milliseconds(pacing.lease))
            metrics.recordPendingSideEffects(try await storage.pendingSideEffects())
        } catch {
            logger.error("side effects could not be read; trying again", metadata: ["error": "\(error)"])
            return 0
        }
        let claimed = now()
        for effect in taken {
            // Past half its lease, an effect not begun goes back: another process may take it
            // when the lease ends, and must not find this one still delivering it.
            guard now() - claimed < Self.milliseconds(pacing.lease) / 2 else {
                try? await storage.sideEffectFailed(effect.key, error: "not begun within half its lease", retryAt: now())
                continue
            }
            do {
                // At most half the lease, for the same reason: a handler that hangs fails, and is tried again.
                try await withTimeLimit(pacing.lease / 2, clock: ContinuousClock()) { try await handler.deliver(effect) }
            } catch {
                let wait = min(pacing.maximumBackoff, .seconds(1) * (1 << min(effect.attempt - 1, 20)))
                metrics.recordSideEffect(delivered: false, kind: effect.kind)
                logger.warning(
                    "a side effect failed; it is tried again later",
                    metadata: ["key": "\(effect.key)", "kind": "\(effect.kind)", "attempt": "\(effect.attempt)", "error": "\(error)"]
                )
                try? await storage.sideEffectFailed(effect.key, error: "\(error)", retryAt: now() + Self.milliseconds(wait))
                continue
            }
            do {
                try await storage.sideEffectDelivered(effect.key, at: now())
                metrics.recordSideEffect(delivered: true, kind: effect.kind)
            } catch {
                // Delivered, not marked: handed out again after its lease, with the same key.
                logger.error("a side effect was delivered but not marked so", metadata: ["key": "\(effect.key)", "error": "\(error)"])
            }
        }
        return taken.count
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
