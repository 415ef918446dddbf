/// Reports whether the server can be reached. The first value is the current state
/// (a baseline for the scheduler, not a change); later values are changes.
public protocol ConnectivityMonitor: Sendable {
    func states() -> AsyncStream<Bool>
}
