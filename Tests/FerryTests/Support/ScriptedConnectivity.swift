import Ferry

/// A connectivity monitor that reports what the test yields.
struct ScriptedConnectivity: ConnectivityMonitor {
    let stream: AsyncStream<Bool>
    func states() -> AsyncStream<Bool> { stream }
}
