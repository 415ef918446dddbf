import Foundation

/// Holds the current `SyncStatus` and pushes every change to its observers.
actor StatusCenter {
    private(set) var status = SyncStatus()
    private var observers: [UUID: AsyncStream<SyncStatus>.Continuation] = [:]

    func update(_ change: (inout SyncStatus) -> Void) {
        var next = status
        change(&next)
        guard next != status else { return }
        status = next
        for observer in observers.values { observer.yield(next) }
    }

    /// A stream that starts with the current status and then yields every change.
    func stream() -> AsyncStream<SyncStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncStatus.self, bufferingPolicy: .unbounded)
        let id = UUID()
        observers[id] = continuation
        continuation.yield(status)
        continuation.onTermination = { [weak self] _ in
            Task { await self?.removeObserver(id) }
        }
        return stream
    }

    private func removeObserver(_ id: UUID) {
        observers[id] = nil
    }

    func finishAll() {
        for observer in observers.values { observer.finish() }
        observers.removeAll()
    }
}
