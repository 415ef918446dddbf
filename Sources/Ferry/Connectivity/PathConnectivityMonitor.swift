#if canImport(Network)
import Network

/// The system's view of the network on Apple platforms, through `NWPathMonitor`.
public struct PathConnectivityMonitor: ConnectivityMonitor {
    /// A monitor of the system's network path.
    public init() {}

    /// `true` while the network path is satisfied: the current state first, then one value per path update (a value may repeat).
    /// Ending the stream stops the `NWPathMonitor`.
    public func states() -> AsyncStream<Bool> {
        let (stream, continuation) = AsyncStream.makeStream(of: Bool.self)
        let monitor = NWPathMonitor()
        monitor.pathUpdateHandler = { path in continuation.yield(path.status == .satisfied) }
        continuation.onTermination = { _ in monitor.cancel() }
        monitor.start(queue: DispatchQueue(label: "ferry.connectivity"))
        return stream
    }
}
#endif
