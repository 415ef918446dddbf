import Foundation

/// Holds the current `SyncStatus` and pushes every change to its observers.
actor StatusCenter {
    private(set) var status = SyncStatus()
    private let observers = Broadcast<SyncStatus>()

    func update(_ change: (inout SyncStatus) -> Void) {
        var next = status
        change(&next)
        guard next != status else { return }
        status = next
        observers.send(next)
    }

    /// A stream that starts with the current status and then yields every change.
    func stream() -> AsyncStream<SyncStatus> {
        observers.subscribe(startingWith: status)
    }

    func finishAll() {
        observers.finish()
    }
}
