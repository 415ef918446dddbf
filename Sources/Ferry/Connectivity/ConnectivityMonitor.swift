/// Reports whether the server can be reached. The first value is the current state
/// (a baseline for the scheduler, not a change); a later value may repeat the one before,
/// which the scheduler ignores.
public protocol ConnectivityMonitor: Sendable {
    /// `true` while the server is reachable, the current state first; the stream ends when the
    /// observer stops iterating.
    func states() -> AsyncStream<Bool>
}
