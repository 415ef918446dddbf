import Foundation
import GRDB
import Logging

/// What happens to a user's local data when they sign out (or another user signs in).
public enum SignOutPolicy: Sendable, Equatable {
    /// Keep the store; pending changes are sent when the same user signs in again.
    case keepPendingChanges
    /// Delete the user's store, pending changes included.
    case eraseLocalData
}

/// Everything a session needs to open a user's store and sync it.
public struct SessionConfiguration: Sendable {
    /// One store file per user is kept here.
    public var storeDirectory: URL
    /// The synced tables of every user's store.
    public var tables: [SyncedTable]
    /// The app's own migrations, run on each user's store as it opens; `nil` for none.
    public var schema: DatabaseMigrator?
    /// What sign-out does to the user's store; by default it is kept, pending changes included.
    public var signOutPolicy: SignOutPolicy = .keepPendingChanges
    /// The tuning of each user's client.
    public var sync = SyncConfiguration()
    /// The tuning of each user's scheduler.
    public var scheduler = SchedulerConfiguration()
    /// How often the session looks for changes another process (a widget, an extension) wrote
    /// into the store, to count them in the status and sync them as it would its own; `nil`
    /// never looks. One indexed read each time.
    public var otherProcessCheckInterval: Duration? = .seconds(1)
    /// Whether the session keeps the server's event stream open while the app is active and
    /// online, so that another device's change starts a run at once (a `serverChange`
    /// trigger); on by default. Off, changes elsewhere arrive with the next run.
    public var liveUpdates = true

    /// A configuration with the default sign-out policy and the default client and scheduler tuning.
    public init(storeDirectory: URL, tables: [SyncedTable], schema: DatabaseMigrator? = nil) {
        self.storeDirectory = storeDirectory
        self.tables = tables
        self.schema = schema
    }
}

/// Binds the engine to the signed-in user: opens that user's store and starts its
/// scheduler on sign-in, stops all of it on sign-out, and on a switch stops the old
/// user's work completely before the new user's starts. Each user's client asks the
/// token provider for that user's token, so one user's changes never travel with
/// another's credentials.
public actor SyncSession {
    /// The signed-in user's engine. It stops at that user's sign-out: its store closes (a read
    /// or write then throws GRDB's error), its client's `sync()` throws ``FerryError/stopped(_:)``
    /// and its status stream ends. Hold the session, not an engine, across sign-ins.
    public struct Engine: Sendable {
        /// The user this engine syncs for.
        public let userID: String
        /// The user's store, open while the user is signed in.
        public let store: FerryStore
        /// The user's client; its requests carry this user's token only.
        public let client: FerryClient
        /// The user's scheduler, `client`'s own, which starts every run of it.
        public let scheduler: SyncScheduler
        /// The user's event stream; `nil` when ``SessionConfiguration/liveUpdates`` is off.
        let live: LiveUpdates?
    }

    /// Returns the current token of the user given; an error ends the sync run that asked for it.
    public typealias UserTokenProvider = @Sendable (_ userID: String) async throws -> String

    private let configuration: SessionConfiguration
    private let transport: any SyncTransport
    private let token: UserTokenProvider
    private let connectivity: (any ConnectivityMonitor)?
    let clientClock: any Clock<Duration>
    private let logger = Logger(label: "ferry.session")
    /// The latest sign-in or sign-out; the next one waits for it (`oneAtATime`).
    private(set) var lastTransition: Task<Void, any Error>?
    private let engineObservers = Broadcast<Engine?>()
    /// What `follow(_:)` did with each value: the user it followed, and the error if that failed.
    private let followed = Broadcast<FollowOutcome>()
    /// How many values `follow(_:)` has received from its sequence.
    private var followReceived = 0
    /// The status of whoever is signed in, the latest kept (`signedOut` while nobody is).
    private let statusObservers = Broadcast<SyncStatus>()
    /// What the app last said with `setActive(_:)`; each new engine starts with it.
    private var active = true
    /// The signed-in user's running engine, which owns the conditions its runs and stream
    /// follow; `nil` while no one is signed in.
    private var user: UserEngine? {
        didSet { engineObservers.send(user?.parts) }
    }

    /// The signed-in user's engine; `nil` while no one is signed in.
    public var engine: Engine? { user?.parts }

    /// A session that starts no engine until `signIn(_:)` or `follow(_:)` is called.
    ///
    /// - Parameters:
    ///   - configuration: where the stores live and how each user's engine is set up.
    ///   - transport: how every user's client reaches the server.
    ///   - token: the token of a given user; asked as ``TokenProvider`` says, never per request.
    ///   - connectivity: reports that hold runs while offline; without one, the server is taken to be reachable.
    ///   - clock: the clock the schedulers and clients wait on.
    public init<C: Clock>(
        configuration: SessionConfiguration,
        transport: any SyncTransport,
        token: @escaping UserTokenProvider,
        connectivity: (any ConnectivityMonitor)? = nil,
        clock: C
    ) where C.Duration == Duration {
        self.configuration = configuration
        self.transport = transport
        self.token = token
        self.connectivity = connectivity
        self.clientClock = clock
        statusObservers.send(SyncStatus(phase: .signedOut))  // what a subscriber starts with until someone signs in
    }

    /// A session on real time (`ContinuousClock`); see the initializer that takes a clock.
    public init(
        configuration: SessionConfiguration,
        transport: any SyncTransport,
        token: @escaping UserTokenProvider,
        connectivity: (any ConnectivityMonitor)? = nil
    ) {
        self.init(configuration: configuration, transport: transport, token: token, connectivity: connectivity, clock: ContinuousClock())
    }

    /// Whether the app is in the foreground (`scenePhase == .active`): periodic runs happen only
    /// while it is. The session keeps it across sign-ins; raise `becameActive` as well to sync
    /// on coming back.
    public func setActive(_ isActive: Bool) async {
        active = isActive
        await user?.setActive(isActive)
    }

    /// The signed-in user's id; `nil` while no one is signed in.
    public var userID: String? { engine?.userID }

    /// The signed-in user's store; `nil` while nobody is signed in. It closes at sign-out.
    public var store: FerryStore? { engine?.store }

    /// The signed-in user's client; `nil` while nobody is signed in. It stops at sign-out.
    public var client: FerryClient? { engine?.client }

    /// The signed-in user's status, its counts exact (see ``FerryClient/status``); `signedOut`
    /// while nobody is signed in.
    public var status: SyncStatus {
        get async {
            guard let client = engine?.client else { return statusObservers.latestValue ?? SyncStatus(phase: .signedOut) }
            return await client.status
        }
    }

    /// The status now, then every change, whoever is signed in: the signed-in user's client's
    /// statuses, `signedOut` at a sign-out, the next user's after a sign-in. The stream lasts as
    /// long as its observer; sign-outs and switches do not end it. No `await`: a view can
    /// subscribe from anywhere, `for await status in session.statusUpdates()`.
    public nonisolated func statusUpdates() -> AsyncStream<SyncStatus> {
        statusObservers.subscribeFromLatest()
    }

    /// Syncs the signed-in user's data now (a `manual` trigger) and returns when the run that
    /// serves this call has finished: everything written before the call has had the server's
    /// answer (applied, merged, or set aside as a dead letter), and what the server had then is
    /// in the store.
    ///
    /// - Parameter full: pull from the beginning instead of the saved cursor.
    /// - Throws: ``FerryError/stopped(_:)`` when nobody is signed in (after a sign-in or sign-out in
    ///   progress has finished), or the user signs out first; ``FerryError/unreachable(_:underlying:)`` at once
    ///   while offline (the sync runs when the network returns); the run's own error when it
    ///   fails. Cancelling the call stops the wait, not the run.
    public func sync(full: Bool = false) async throws {
        _ = await lastTransition?.result
        guard let engine else { throw FerryError.stopped("nobody is signed in") }
        try await engine.scheduler.run(for: .manual, kind: full ? .full : nil)
    }

    /// The signed-in user's queue and why it is not leaving, with what their scheduler and
    /// client are doing (waiting for the network, a settle window, Retry-After…); `nil` while
    /// nobody is signed in.
    public func queueSnapshot() async throws -> QueueSnapshot? {
        guard let engine else { return nil }
        var snapshot = try await engine.client.queueSnapshot()
        snapshot.scheduler = await engine.scheduler.state
        return snapshot
    }

    /// The signed-in user's queue snapshot now, then again after every change of status, every
    /// trigger, run and scheduler decision, and every sign-in and sign-out (`nil` while nobody is
    /// signed in): for a support screen that stays current. A snapshot equal to the one before is
    /// not sent again unless a second has passed (its ages are counted to `takenAt`); one read at
    /// a time, the latest change wins. Each read counts the queue (tens of milliseconds for
    /// 100,000 queued changes), so observe while the screen is shown, not for the app's life.
    public nonisolated func queueSnapshotUpdates() -> AsyncStream<QueueSnapshot?> {
        let (snapshots, output) = AsyncStream.makeStream(of: QueueSnapshot?.self, bufferingPolicy: .bufferingNewest(1))
        let (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let watchers = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { for await _ in self.statusUpdates() { changed.yield() } }
                group.addTask {
                    // A scheduler's events end when it stops (a sign-out); the next engine follows.
                    for await engine in await self.engineUpdates() {
                        changed.yield()
                        guard let engine else { continue }
                        for await _ in await engine.scheduler.eventStream() { changed.yield() }
                    }
                }
            }
        }
        let reader = Task {
            var last: QueueSnapshot??
            for await _ in changes {
                // A read that fails (a store closing, busy) is skipped, not shown as a sign-out.
                guard let snapshot = try? await self.queueSnapshot() as QueueSnapshot?? else { continue }
                var compared = snapshot
                // Ages are counted to `takenAt`: a snapshot a second newer is news even if nothing else moved.
                if case .some(.some(let previous)) = last, let taken = snapshot?.takenAt, taken.timeIntervalSince(previous.takenAt) < 1 {
                    compared?.takenAt = previous.takenAt
                }
                guard last != .some(compared) else { continue }
                last = .some(snapshot)
                output.yield(snapshot)
            }
        }
        output.onTermination = { _ in
            watchers.cancel()
            reader.cancel()
        }
        return snapshots
    }

    /// The signed-in user's engine now, then on every sign-in (an engine) and sign-out (`nil`).
    public func engineUpdates() -> AsyncStream<Engine?> {
        engineObservers.subscribe(startingWith: .some(engine), bufferingPolicy: .bufferingNewest(1))
    }

    /// Waits until someone is signed in and returns their engine; throws `CancellationError` if cancelled first.
    public func signedInEngine() async throws -> Engine {
        for await engine in engineUpdates() {
            if let engine { return engine }
        }
        throw CancellationError()
    }

    /// Follows the app's signed-in user (`nil`: signed out) until the sequence ends: each value
    /// is a `signIn(_:)` or `signOut()`, done before the next value is read. `engineUpdates()`
    /// and `statusUpdates()` tell when each has finished; to wait for one, call it directly.
    /// A transition that fails (a store that cannot be opened) is logged as a warning, leaves
    /// nobody signed in, and the next value is still followed; only the sequence's own error,
    /// or cancellation, ends the call.
    public func follow<Users: AsyncSequence>(_ users: Users) async throws where Users.Element == String? {
        // Whoever waits in `whenFollowed` hears that nothing more will be followed.
        defer { followed.send(FollowOutcome(number: followReceived, userID: nil, error: nil, ended: true)) }
        for try await user in users {
            followReceived += 1
            let number = followReceived
            do {
                if let user { try await signIn(user) } else { try await signOut() }
                followed.send(FollowOutcome(number: number, userID: user, error: nil))
            } catch let error where !(error is CancellationError) {
                // The app must hear of it (a store that cannot be opened), and the next value is still followed.
                logger.warning("could not follow the signed-in user", metadata: ["user": "\(user ?? "nobody")", "error": "\(error)"])
                followed.send(FollowOutcome(number: number, userID: user, error: error))
            }
        }
    }

    /// Waits until `follow(_:)` has done every value it received and `userID` is signed in
    /// (`nil`: nobody is), and returns the engine (`nil` once signed out). Throws the error
    /// following `userID` failed with, if that was the last value done, or `CancellationError`
    /// if `follow` ends first or the caller is cancelled. An app that follows its auth state
    /// calls this after feeding a sign-in, to wait until Ferry is ready for that user. A value
    /// counts once `follow` has received it from the sequence, which an `AsyncStream` hands
    /// over at once but not synchronously: feed it before calling.
    @discardableResult
    public func whenFollowed(_ userID: String?) async throws -> Engine? {
        let start = FollowOutcome(number: followReceived, userID: engine?.userID, error: nil)
        for await outcome in followed.subscribeFromLatest(orFirst: start) {
            guard outcome.number >= followReceived else { continue }  // values received since are not done yet
            if (engine?.userID).hasSameBytes(as: userID) { return engine }
            if outcome.userID.hasSameBytes(as: userID), let error = outcome.error { throw error }
            if outcome.ended { break }
        }
        throw CancellationError()
    }

    /// Starts the engine for `userID`, after stopping another user's, and returns once it runs:
    /// `store`, `client` and `status` are then that user's. Raises `launch`. Signing in the user
    /// who is signed in does nothing.
    ///
    /// Sign-ins and sign-outs happen strictly one after another, in the order they were
    /// called: one never starts while another is half done, so two engines never share a
    /// store and an erase never removes a file a newer engine has opened.
    public func signIn(_ userID: String) async throws {
        try await oneAtATime { try await self.performSignIn(userID) }
    }

    /// Stops the current user's engine and returns once it has stopped: the run in progress is
    /// cancelled and its batch returned to the queue, nothing is left in flight, and the store
    /// is closed (and erased under `.eraseLocalData`).
    public func signOut() async throws {
        try await oneAtATime { try await self.performSignOut() }
    }

    /// Runs `transition` once every transition called before it has finished.
    private func oneAtATime(_ transition: @escaping @Sendable () async throws -> Void) async throws {
        let previous = lastTransition
        let next = Task {
            _ = await previous?.result
            try await transition()
        }
        lastTransition = next
        try await next.value
    }

    private func performSignIn(_ userID: String) async throws {
        // Byte for byte: "zoë" composed and decomposed are two users, with two stores and tokens.
        guard !(engine?.userID).hasSameBytes(as: userID) else { return }
        if engine != nil { try await performSignOut() }
        let configuration = self.configuration
        // Opening may migrate, move a store kept under its old name, and wait up to 10 s for
        // another process's lock.
        let store = try await offCooperativeThreads("ferry.store.open") {
            try FileManager.default.createDirectory(at: configuration.storeDirectory, withIntermediateDirectories: true)
            let path = try StoreLocation.path(forUser: userID, in: configuration.storeDirectory)
            return try FerryStore(path: path.path, schema: configuration.schema, tables: configuration.tables)
        }
        let token = self.token
        let client = FerryClient(
            store: store,
            transport: transport,
            token: { try await token(userID) },
            clock: clientClock,
            configuration: configuration.sync,
            scheduler: configuration.scheduler,
            jitterSeed: nil
        )
        let scheduler = await client.scheduler
        let journal = client.journal
        await scheduler.setJournal { event, at in await journal.record(event.journalEvent(at: at)) }
        let observer = store.observeQueuedChanges {
            Task {
                await client.refreshCounts()  // observers see "N changes waiting" at once, not after the next run
                await scheduler.trigger(.localChange)
            }
        }
        let live =
            configuration.liveUpdates ? LiveUpdates(client: client, scheduler: scheduler, clock: clientClock, retry: configuration.sync.retry) : nil
        let user = UserEngine(parts: Engine(userID: userID, store: store, client: client, scheduler: scheduler, live: live), active: active)
        self.user = user
        publish(await client.status)  // the new user's, before signIn returns
        let statuses = await client.statusUpdates()
        let relay = Task { [weak self] in
            for await status in statuses {
                await self?.publish(status)
                if status.updateRequired != nil { await user.updateRequired() }
            }
        }
        var readers: [Task<Void, Never>] = []
        if let interval = configuration.otherProcessCheckInterval {
            // Wall time shared with other processes, not a wait of the sync: the real clock (a
            // test clock's sleeper would also stand in the way of tests that wait for one).
            readers.append(
                Task {
                    await OtherProcessWrites.watch(store, own: observer, every: interval, clock: ContinuousClock()) {
                        await client.refreshCounts()
                        await scheduler.trigger(.localChange)
                    }
                }
            )
        }
        if let connectivity {
            await user.feed(
                Task {
                    for await online in connectivity.states() { await user.setOnline(online) }
                }
            )
        }
        await user.start(observer: observer, relay: relay, readers: readers)
        logger.debug("signed in", metadata: ["user": "\(userID)"])
    }

    private func performSignOut() async throws {
        guard let user else { return }
        let engine = user.parts
        self.user = nil
        await user.stop()
        publish(SyncStatus(phase: .signedOut))
        try await user.close()
        if configuration.signOutPolicy == .eraseLocalData {
            let path = engine.store.path
            for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
                try FileManager.default.removeItem(atPath: path + suffix)
            }
            AttachmentFolder.removeAll(besideStoreAt: path)
        }
        logger.debug("signed out", metadata: ["user": "\(engine.userID)", "policy": "\(configuration.signOutPolicy)"])
    }

    private func publish(_ status: SyncStatus) {
        guard statusObservers.latestValue.map(status.isNews(after:)) ?? true else { return }
        statusObservers.send(status)
    }

    /// Forwards an app event to the signed-in user's scheduler; without a user there is nothing to sync.
    public func trigger(_ trigger: SyncTrigger, kind: SyncKind? = nil) async {
        await engine?.scheduler.trigger(trigger, kind: kind)
    }
}

/// What ``SyncSession/follow(_:)`` did with one value: the `number`th it received.
private struct FollowOutcome: Sendable {
    var number: Int
    var userID: String?
    var error: (any Error)?
    /// `follow` returned: nothing more will be followed.
    var ended = false
}

extension SyncScheduler.Event {
    /// The event as the journal records it.
    func journalEvent(at: Date) -> JournalEvent {
        switch self {
        case .triggerReceived(let trigger):
            JournalEvent(at: at, kind: .triggerReceived, message: "\(trigger.rawValue) received", details: [.trigger: trigger.rawValue])
        case .trigger(let trigger, let fate):
            JournalEvent(
                at: at,
                kind: .trigger,
                message: "\(trigger.rawValue): \(fate.description)",
                details: fate.details.merging([.trigger: trigger.rawValue]) { $1 }
            )
        case .runStarted(let number, let kind):
            JournalEvent(
                at: at,
                kind: .schedulerRun,
                message: "run \(number) started (\(kind.rawValue))",
                details: [.run: "\(number)", .kind: kind.rawValue]
            )
        case .runFinished(let number, let succeeded):
            JournalEvent(
                at: at,
                kind: .schedulerRun,
                message: "run \(number) \(succeeded ? "succeeded" : "failed")",
                details: [.run: "\(number)", .outcome: succeeded ? "succeeded" : "failed"]
            )
        case .held(let held):
            JournalEvent(
                at: at,
                kind: .schedulerHeld,
                message: held ? "runs held until the app is active (a background task's time ran out)" : "runs may start again",
                details: [.held: "\(held)"]
            )
        }
    }
}
