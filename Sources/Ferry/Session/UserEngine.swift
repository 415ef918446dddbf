import Foundation

/// One signed-in user's engine: it owns the conditions the user's sync runs under (whether
/// the app is active, whether the device is online, whether the engine still runs) and
/// drives the scheduler and the event stream from them, so no part keeps a copy another must
/// be told about; and it stops its parts in the one order that leaves nothing behind.
actor UserEngine {
    /// What the engine is doing; each case carries only what is valid in it, the tasks of a
    /// running engine included.
    enum State {
        /// Running: periodic runs only while `active`, runs and the stream only while `online`
        /// (an unknown connectivity counts as online).
        case running(Running)
        /// Stopped but for the store, still open: nothing runs or starts.
        case stopping
        /// Stopped: the store is closed; nothing of this user's runs again.
        case stopped
    }

    /// A running engine's conditions, and the tasks it stops in order.
    struct Running {
        var active: Bool
        var online = true
        /// Tasks that feed the engine reports (connectivity), cancelled first when it stops.
        var feeds: [Task<Void, Never>] = []
        /// Tasks that read the store (other processes' writes), cancelled and awaited before it closes.
        var readers: [Task<Void, Never>] = []
        /// Carries the client's statuses to the session; it ends when the client stops.
        var relay: Task<Void, Never>?
        /// Raises `localChange` for this process's writes, while kept.
        var observer: QueuedChangeObserver?
    }

    let parts: SyncSession.Engine
    private(set) var state: State

    init(parts: SyncSession.Engine, active: Bool) {
        self.parts = parts
        self.state = .running(Running(active: active))
    }

    /// Starts the engine: periodic runs and the stream as `state` says, and a launch run.
    func start(observer: QueuedChangeObserver, relay: Task<Void, Never>, readers: [Task<Void, Never>]) async {
        guard case .running(var running) = state else {
            for task in readers + [relay] { task.cancel() }  // stopped before it started
            return
        }
        (running.observer, running.relay, running.readers) = (observer, relay, readers)
        state = .running(running)
        await parts.scheduler.setActive(running.active)
        await parts.scheduler.trigger(.launch)
        await driveStream()
    }

    /// Adds a task that feeds the engine reports, cancelled when it stops (at once if it has).
    func feed(_ task: Task<Void, Never>) {
        guard case .running(var running) = state else { return task.cancel() }
        running.feeds.append(task)
        state = .running(running)
    }

    /// The server requires an app update: nothing of this user's talks to it again in this
    /// process. The scheduler closed its gate on the run that heard it, and the stream ends
    /// itself; the feeds (a monitor probing the server) stop here.
    func updateRequired() {
        guard case .running(var running) = state else { return }
        for task in running.feeds { task.cancel() }
        running.feeds = []
        state = .running(running)
    }

    /// The running engine's conditions; `nil` once it stops.
    private var conditions: (active: Bool, online: Bool)? {
        guard case .running(let running) = state else { return nil }
        return (running.active, running.online)
    }

    // The actor is reentrant: while one report is told to the scheduler, another may change
    // `state`. Each report, once told, reads `state` again and tells what it says now if that
    // differs, so the last word the scheduler and the stream hear is the latest state's.

    func setActive(_ isActive: Bool) async {
        guard case .running(var running) = state else { return }
        running.active = isActive
        state = .running(running)
        // Told even when unchanged: an app that says it is active while a background sync runs
        // is one that came to the front (`SyncScheduler.activations`).
        await parts.scheduler.setActive(isActive)  // periodic runs, if configured, while active
        if let active = conditions?.active, active != isActive { await parts.scheduler.setActive(active) }
        await driveStream()
    }

    func setOnline(_ isOnline: Bool) async {
        guard case .running(var running) = state else { return }
        running.online = isOnline
        state = .running(running)
        // Told even when unchanged: the scheduler journals each report and may start the run
        // a report of the link's return asks for.
        await parts.scheduler.connectivityChanged(online: isOnline)
        if let online = conditions?.online, online != isOnline { await parts.scheduler.connectivityChanged(online: online) }
        await driveStream()
    }

    /// Opens the event stream while active and online, and closes it otherwise (in the
    /// background, offline), until what the stream was told is what `state` says.
    private func driveStream() async {
        var told: Bool?
        while let (active, online) = conditions, told != (active && online) {
            told = active && online
            await parts.live?.setWanted(active && online)
        }
    }

    /// Stops every part but the store, in order, and returns once each has: the feeds and the
    /// store's readers first (no read of the store after it closes), then the stream, the
    /// client with its scheduler (the run in progress is cancelled and its batch returned to the
    /// queue) and the relay of its statuses (nothing of this user's comes after). `close()` then
    /// closes the store.
    func stop() async {
        guard case .running(var running) = state else { return }
        state = .stopping
        for task in running.feeds + running.readers { task.cancel() }
        for reader in running.readers { await reader.value }
        running.observer = nil  // its last holder: no more localChange while the parts stop
        await parts.live?.stop()
        await parts.client.stop()
        await running.relay?.value
    }

    /// Closes the store, once stopped.
    func close() async throws {
        guard case .stopping = state else { return }
        try await parts.store.close()
        state = .stopped
    }
}
