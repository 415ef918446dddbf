import FerryProtocol
import Foundation
import Logging

/// Keeps one server event stream open while its `UserEngine` wants one (the app active and
/// online), and
/// turns what it says into triggers: `ready` (the stream opened, and what changed while none
/// was open may be unpulled) and each `change` become `serverChange`, which the scheduler
/// coalesces like any trigger. The stream carries no data: pulls stay the one way data arrives.
///
/// After a failure it opens again with capped, jittered backoff (the retry policy's), and
/// after a `429` or `503` no sooner than `Retry-After`: never a tight loop against a server
/// that is down or refuses the token (a 401 renews the token for the next attempt, as for any
/// request).
actor LiveUpdates {
    private let client: FerryClient
    private let scheduler: SyncScheduler
    private let clock: any Clock<Duration>
    /// Time since the stream was made, on `clock`: how long a stream lived is measured on the
    /// clock the waits between streams sleep on.
    private let elapsed: @Sendable () -> Duration
    private let retry: RetryPolicy
    private var random = JitterGenerator()
    private let logger = Logger(label: "ferry.live")
    /// Whether the engine wants a stream; `stopped` is for good.
    private var wanted = false
    private var stopped = false
    private var task: Task<Void, Never>?
    /// Streams opened so far (answered 200), for tests and the journal.
    private(set) var opened = 0
    /// The current stream said something after `ready`, or lasted `healthyLifetime`.
    private var lived = false
    /// A stream open this long was healthy, even if it said nothing after `ready` (a proxy that
    /// closes idle connections before the 15 s keep-alive).
    static let healthyLifetime: Duration = .seconds(5)

    init(client: FerryClient, scheduler: SyncScheduler, clock: any Clock<Duration>, retry: RetryPolicy) {
        self.client = client
        self.scheduler = scheduler
        self.clock = clock
        self.elapsed = Self.stopwatch(on: clock)
        self.retry = retry
    }

    private static func stopwatch<C: Clock<Duration>>(on clock: C) -> @Sendable () -> Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }

    /// Whether a stream is wanted: open while the engine wants one, until stopped.
    var isWanted: Bool { wanted && !stopped }

    /// Whether a stream is open or being opened.
    var isRunning: Bool { task != nil }

    /// Opens the stream, or closes it and returns once it is closed.
    func setWanted(_ isWanted: Bool) async {
        wanted = isWanted
        await update()
    }

    /// Closes the stream for good (sign-out) and returns once it is closed.
    func stop() async {
        stopped = true
        await update()
    }

    private func update() async {
        if isWanted, task == nil {
            task = Task { await self.keepOpen() }
        } else if !isWanted, let task {
            self.task = nil
            task.cancel()
            await task.value
        }
    }

    /// Opens the stream, reads it, and opens it again, until cancelled or streams turn out unsupported.
    private func keepOpen() async {
        var failures = 0
        while !Task.isCancelled {
            var wait: Duration?
            await scheduler.liveStreamOpening()
            do {
                let stream = try await client.openEventStream()
                switch stream.status {
                case 200:
                    opened += 1
                    lived = false
                    let opening = elapsed()
                    defer { if elapsed() - opening >= Self.healthyLifetime { lived = true } }
                    try await read(stream)
                    // Ended (the token expired, the server restarted): see below.
                    failures += 1
                case 429, 503:
                    failures += 1
                    let seconds = SyncConnection.serverWait(stream.headers["retry-after"].flatMap { Double($0) } ?? 1)
                    wait = .seconds(seconds)
                default:
                    failures += 1
                    logger.debug("the event stream was refused", metadata: ["status": "\(stream.status)"])
                }
            } catch is EventStreamsUnsupported {
                logger.debug("the transport cannot stream; live changes are off")
                await scheduler.liveStreamClosed()
                return
            } catch FerryError.Code.updateRequired {
                await scheduler.liveStreamClosed()  // nothing is sent until the app is updated
                return
            } catch {
                if Task.isCancelled {
                    await scheduler.liveStreamClosed()
                    return
                }
                failures += 1
                logger.debug("the event stream failed", metadata: ["error": "\(error)"])
            }
            // A stream that lived (it said something after `ready`, or lasted a while) is
            // followed by one short pause, however it ended; one that ends at once counts as a
            // failure, so a proxy that cuts every stream after its first bytes is retried ever
            // more slowly.
            // Ended, refused or failed: a run that waited for `ready` goes (after it, nothing waits).
            await scheduler.liveStreamClosed()
            if lived { failures = 1 }
            lived = false
            let delay = max(wait ?? .zero, retry.delay(forAttempt: failures, using: &random))
            do { try await clock.sleep(for: delay) } catch { return }
        }
    }

    /// Reads events until the stream ends, noting whether it lived: `ready`, then anything more.
    private func read(_ stream: TransportStream) async throws {
        var ready = false
        for try await event in ServerSentEvents(chunks: stream.body) {
            if ready { lived = true }
            guard case .event(let name, _) = event else { continue }  // a keep-alive
            switch name {
            case LiveEventName.ready:
                ready = true
                await scheduler.liveStreamOpened()
            case LiveEventName.change:
                await scheduler.trigger(.serverChange)
            default:
                break  // an event a newer server sends: ignored, as the protocol says
            }
        }
    }
}
