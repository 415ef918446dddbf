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
        /// Stopped but for the store, still open: nothing runs or starts.
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
        guard case .running(let active, _) = state else { return }
        await parts.scheduler.setActive(active)
        await parts.scheduler.trigger(.launch)
        await driveStream()
    }

    /// Adds a task that feeds the engine reports, cancelled when it stops (at once if it has).
    func feed(_ task: Task<Void, Never>) {
        guard case .running = state else { return task.cancel() }
        feeds.append(task)
    }

    // The actor is reentrant: while one report is told to the scheduler, another may change
    // `state`. Each report, once told, reads `state` again and tells what it says now if that
    // differs, so the last word the scheduler and the stream hear is the latest state's.

    func setActive(_ isActive: Bool) async {
        guard case .running(_, let online) = state else { return }
        state = .running(active: isActive, online: online)
        // Told even when unchanged: an app that says it is active while a background sync runs
        // is one that came to the front (`SyncScheduler.activations`).
        await parts.scheduler.setActive(isActive)  // periodic runs, if configured, while active
        if case .running(let active, _) = state, active != isActive { await parts.scheduler.setActive(active) }
        await driveStream()
    }

    func setOnline(_ isOnline: Bool) async {
        guard case .running(let active, _) = state else { return }
        state = .running(active: active, online: isOnline)
        // Told even when unchanged: the scheduler journals each report and may start the run
        // a report of the link's return asks for.
        await parts.scheduler.connectivityChanged(online: isOnline)
        if case .running(_, let online) = state, online != isOnline { await parts.scheduler.connectivityChanged(online: online) }
        await driveStream()
    }

    /// Opens the event stream while active and online, and closes it otherwise (in the
    /// background, offline), until what the stream was told is what `state` says.
    private func driveStream() async {
        var told: Bool?
        while case .running(let active, let online) = state, told != (active && online) {
            told = active && online
            await parts.live?.setWanted(active && online)
        }
    }

    /// Stops every part but the store, in order, and returns once each has: the feeds and the
    /// store's readers first (no read of the store after it closes), then the stream, the
    /// scheduler (the run in progress is cancelled and its batch returned to the queue), the
    /// client and the relay of its statuses (nothing of this user's comes after). `close()` then
    /// closes the store.
    func stop() async {
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
    }

    /// Closes the store, once stopped.
    func close() async throws {
        guard case .stopping = state else { return }
        try await parts.store.close()
        state = .stopped
    }
}
