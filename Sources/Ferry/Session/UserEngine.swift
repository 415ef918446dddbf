import Foundation

/// One signed-in user's engine: it owns the conditions the user's sync runs under (whether
/// the app is active, whether the device is online, whether the engine still runs) and
/// drives the scheduler and the event stream from them, so no part keeps a copy another must
/// be told about; and it stops its parts in the one order that leaves nothing behind.
actor UserEngine {
    /// What the engine is doing; each case carries only what is valid in it.
    enum State: Equatable {
        /// Running: periodic runs only while `active`, runs and the stream only while `online`
        /// (an unknown connectivity counts as online).
        case running(active: Bool, online: Bool)
        /// Stopping: the run in progress ends, the stream closes, nothing new starts.
        case stopping
        /// Stopped: the store is closed; nothing of this user's runs again.
        case stopped
    }

    let parts: SyncSession.Engine
    private(set) var state: State
    /// Tasks that feed the engine reports (connectivity), cancelled first when it stops.
    private var feeds: [Task<Void, Never>] = []
    /// Tasks that read the store (other processes' writes), cancelled and awaited before it closes.
    private var readers: [Task<Void, Never>] = []
    /// Carries the client's statuses to the session; it ends when the client stops.
    private var relay: Task<Void, Never>?
    private var observer: QueuedChangeObserver?

    init(parts: SyncSession.Engine, active: Bool) {
        self.parts = parts
        self.state = .running(active: active, online: true)
    }

    /// Starts the engine: periodic runs and the stream as `state` says, and a launch run.
    func start(observer: QueuedChangeObserver, relay: Task<Void, Never>, readers: [Task<Void, Never>]) async {
        self.observer = observer
        self.relay = relay
        self.readers = readers
        await drive()
        await parts.scheduler.trigger(.launch)
    }

    /// Adds a task that feeds the engine reports, cancelled when it stops (at once if it has).
    func feed(_ task: Task<Void, Never>) {
        guard case .running = state else { return task.cancel() }
        feeds.append(task)
    }

    func setActive(_ isActive: Bool) async {
        guard case .running(_, let online) = state else { return }
        state = .running(active: isActive, online: online)
        // Told even when unchanged: an app that says it is active while a background sync runs
        // is one that came to the front (`SyncScheduler.activations`).
        await drive()
    }

    func setOnline(_ isOnline: Bool) async {
        guard case .running(let active, _) = state else { return }
        state = .running(active: active, online: isOnline)
        // Told even when unchanged: the scheduler journals each report and may start the run
        // a report of the link's return asks for.
        await parts.scheduler.connectivityChanged(online: isOnline)
        await parts.live?.setWanted(active && isOnline)
    }

    /// Tells the scheduler and the stream what `state` allows.
    private func drive() async {
        guard case .running(let active, let online) = state else { return }
        await parts.scheduler.setActive(active)  // periodic runs, if configured, while active
        await parts.live?.setWanted(active && online)  // the event stream is closed in the background
    }

    /// Stops every part in order and returns once each has: the feeds and the store's readers
    /// first (no read of the store after it closes), then the stream, the scheduler (the run in
    /// progress is cancelled and its batch returned to the queue), the client and the relay of
    /// its statuses (nothing of this user's comes after), and last the store.
    func stop() async throws {
        guard case .running = state else { return }
        state = .stopping
        for task in feeds + readers { task.cancel() }
        for reader in readers { await reader.value }
        (feeds, readers, observer) = ([], [], nil)
        await parts.live?.stop()
        await parts.scheduler.stop()
        await parts.client.stop()
        await relay?.value
        relay = nil
        try await parts.store.close()
        state = .stopped
    }
}
