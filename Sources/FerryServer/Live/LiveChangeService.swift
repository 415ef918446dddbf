import Logging
import ServiceLifecycle

/// Feeds the event streams: hears what each commit changed (`SyncStorage/followChanges(_:)`)
/// and wakes the streams that may read it, and ticks once a second for keep-alives and
/// expired tokens. At graceful shutdown it ends every stream, which the HTTP server would
/// otherwise wait for.
struct LiveChangeService: Service {
    let storage: any SyncStorage
    let live: LiveChanges
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        try await storage.followChanges { signals in live.publish(signals) }
                    } catch {
                        logger.error("stopped following changes; event streams hear nothing more", metadata: ["error": "\(error)"])
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        do { try await Task.sleep(for: .seconds(1)) } catch { return }
                        live.tick()
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }
        live.endAll()
    }
}
