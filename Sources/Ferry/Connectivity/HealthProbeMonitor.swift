import FerryProtocol
import Foundation

/// A portable monitor that asks the server's `/v1/health`: every `interval` while
/// reachable, with exponential backoff (up to `interval`) while not. For Linux, where
/// `PathConnectivityMonitor` does not exist.
public struct HealthProbeMonitor: ConnectivityMonitor {
    private let transport: any SyncTransport
    private let clock: any Clock<Duration>
    private let interval: Duration

    /// A monitor that probes the server through `transport` every `interval` (30 s by default, a second at least) while it
    /// answers, sleeping on `clock`.
    public init(transport: any SyncTransport, clock: any Clock<Duration> = ContinuousClock(), interval: Duration = .seconds(30)) {
        self.transport = transport
        self.clock = clock
        self.interval = max(interval, .seconds(1))  // a shorter one would probe in a hot loop
    }

    /// Starts probing at once: the first value is the first probe's result (`true` for a 200), later values are changes.
    /// Ending the stream stops the probing.
    public func states() -> AsyncStream<Bool> {
        let (stream, continuation) = AsyncStream.makeStream(of: Bool.self)
        let task = Task { [transport, clock, interval] in
            var last: Bool?
            var retryDelay = Duration.seconds(1)
            while !Task.isCancelled {
                let reachable = (try? await transport.send(TransportRequest(method: "GET", path: Endpoint.health)).status) == 200
                if reachable != last {
                    continuation.yield(reachable)
                    last = reachable
                }
                let pause = reachable ? interval : retryDelay
                retryDelay = reachable ? .seconds(1) : min(retryDelay * 2, interval)
                do { try await clock.sleep(for: pause) } catch { break }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}
