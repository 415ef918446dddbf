import Foundation
import GRDB
import Logging

/// Tuning of the scheduler.
public struct SchedulerConfiguration: Sendable {
    /// Triggers this close together coalesce into one run; `manual` and `backgroundTask` triggers use `manualSettleWindow`.
    public var settleWindow: Duration = .milliseconds(250)
    /// The settle window of `manual` and `backgroundTask` triggers, which a caller waits on; zero by default, so a manual sync starts at once (the minimum interval and
    /// the network permitting).
    public var manualSettleWindow: Duration = .zero
    /// The least time from the end of one run to the start of the next. It delays runs, never drops them.
    public var minimumInterval: Duration = .seconds(2)
    /// The settle window of a `serverChange` trigger: the server already sends at most one
    /// change event every 50 ms, so a short window is enough to gather a local change with it.
    public var liveSettleWindow: Duration = .milliseconds(20)
    /// The least time from the end of one run to a run a `serverChange` asks for: short, so
    /// another device's write shows at once, and long enough that a burst of another device's
    /// writes makes a few runs, not one per event.
    public var liveMinimumInterval: Duration = .milliseconds(250)
    /// How long a run (not one a person or a background task waits for) waits, from when the
    /// event stream began opening, for its `ready`: one pull then serves both (a relaunch, a
    /// return to the app), instead of a second pull for changes made while the stream opened.
    public var liveOpeningWait: Duration = .seconds(1)
    /// Run periodically while the app is active, at least a second apart; `nil` (the default) for never.
    /// The timer starts with ``SyncScheduler/setActive(_:)`` (a session calls it for each user it signs in).
    public var periodicInterval: Duration?
    /// Trigger fates kept in ``SyncScheduler/history``; older ones are dropped first.
    public var historyCapacity = 1_000

    /// The defaults: a 250 ms settle window (none for manual triggers, 20 ms for a server's
    /// change), 2 s between runs (250 ms before a run a server's change asks for), no periodic
    /// runs, and the latest 1,000 trigger fates kept.
    public init() {}
}

/// The only thing that starts a sync run.
///
/// Any burst of triggers yields one run; triggers during a run yield exactly one
/// follow-up run; nothing is ever dropped, only delayed (settle window, minimum
/// interval, offline). Every trigger's fate is recorded.
///
/// Its decisions are `SchedulerStateMachine`'s (internal); the actor carries out the actions it returns
/// and keeps the tasks: the run, the timer, the periodic timer and the waiting callers.
public actor SyncScheduler {
    /// What the scheduler reports as it works; tests and the journal read it.
    public enum Event: Sendable, Equatable {
        /// A trigger arrived; its fate follows when it is decided.
        case triggerReceived(SyncTrigger)
        /// What became of a trigger.
        case trigger(SyncTrigger, TriggerFate)
        /// Run number N started, full or incremental.
        case runStarted(Int, SyncKind)
        /// Run number N ended, with or without an error.
        case runFinished(Int, succeeded: Bool)
        /// Runs were held after a background task's time ran out (`true`), or may start again (`false`).
        case held(Bool)
    }

    /// Performs one run of the given kind; an error marks the run failed and is thrown to the callers waiting for it.
    public typealias Runner = @Sendable (SyncKind) async throws -> Void

    /// Time since the scheduler was made, on its clock.
    private let elapsed: @Sendable () -> Duration
    /// Sleeps on the scheduler's clock until that much time since it was made.
    private let sleepUntil: @Sendable (Duration) async throws -> Void
    /// Performs a run and reports what it did (a client's runs; a public `Runner` reports nothing).
    private let runner: @Sendable (SyncKind) async throws -> SyncReport
    /// What callers get once the scheduler has stopped.
    private let stoppedError: FerryError
    private let logger = Logger(label: "ferry.scheduler")
    private let events = Broadcast<Event>()
    /// Events for the journal, written in order by one task.
    private var journalFeed: AsyncStream<(Event, Date)>.Continuation?
    private var journalWriter: Task<Void, Never>?

    private var machine: SchedulerStateMachine
    private var running: Task<Void, Never>?
    /// The error of the run that just failed, or the report of the one that just succeeded, for its callers.
    private var runError: (any Error)?
    private var runReport: SyncReport?
    /// The server's `update_required`, once a run met it: every caller after gets it.
    private var updateRequired: FerryError?
    private var timer: Task<Void, Never>?
    private var periodic: Task<Void, Never>?
    /// Callers of `run(for:kind:)`, `initialSync()` and `sync(_:)`, until their run has ended.
    private var waiters: [UUID: CheckedContinuation<Served, any Error>] = [:]
    /// Callers of a client's `sync()`; a cancelled one withdraws what only it asked for.
    private var syncCallers: Set<UUID> = []
    /// Those whose run is theirs alone: cancelling one cancels the run it started.
    private var owners: Set<UUID> = []

    /// What a run gives the callers it served.
    struct Served {
        var number: Int
        var report: SyncReport
    }

    /// The latest connectivity report; `nil` before the first.
    var online: Bool? { machine.online }
    /// How many callers wait for a run, the one in progress or the next.
    var waitingCallers: Int { waiters.count }
    /// How many times the app said it became active: a background sync that started before the
    /// latest does not hold runs the app in front of its user is making.
    var activations: Int { machine.activations }
    /// The latest triggers and their fates, oldest first; at most `historyCapacity`.
    public var history: [(SyncTrigger, TriggerFate)] { machine.history }

    /// A scheduler that calls `runner` for each run and times settle windows, the minimum interval and periodic runs
    /// on `clock`. It starts no run until something triggers one.
    public init<C: Clock>(clock: C, configuration: SchedulerConfiguration = SchedulerConfiguration(), runner: @escaping Runner)
    where C.Duration == Duration {
        self.init(clock: clock, configuration: configuration, stoppedError: Self.stoppedError) { kind in
            try await runner(kind)
            return SyncReport()
        }
    }

    /// A client's scheduler: each run reports what it did to the callers it served, and a
    /// stopped scheduler answers `stoppedError`.
    init<C: Clock>(
        clock: C,
        configuration: SchedulerConfiguration,
        stoppedError: FerryError,
        reportingRunner runner: @escaping @Sendable (SyncKind) async throws -> SyncReport
    ) where C.Duration == Duration {
        let start = clock.now
        self.elapsed = { start.duration(to: clock.now) }
        self.sleepUntil = { offset in try await clock.sleep(until: start.advanced(by: offset), tolerance: nil) }
        self.machine = SchedulerStateMachine(configuration: configuration)
        self.runner = runner
        self.stoppedError = stoppedError
    }

    /// Receives every event from now on.
    public func eventStream() -> AsyncStream<Event> {
        events.subscribe()
    }

    /// Where events are written for people to read later, in order, with the time they happened.
    func setJournal(_ journal: @escaping @Sendable (Event, Date) async -> Void) {
        journalFeed?.finish()
        let (stream, feed) = AsyncStream.makeStream(of: (Event, Date).self)
        journalFeed = feed
        journalWriter = Task { for await (event, at) in stream { await journal(event, at) } }
    }

    /// Asks for a run.
    public func trigger(_ trigger: SyncTrigger, kind: SyncKind? = nil) {
        perform(machine.trigger(trigger, kind: kind, now: elapsed()))
    }

    /// The server's event stream opened: a run pulls what changed while it was closed, unless
    /// one is already pending (it pulls after the stream opened).
    func liveStreamOpened() {
        perform(machine.liveStreamOpened(now: elapsed()))
    }

    /// The event stream began opening: a pending run waits for its `ready` (`liveOpeningWait` at most).
    func liveStreamOpening() {
        machine.liveStreamOpening(now: elapsed())
    }

    /// The event stream failed or ended: a run that waited for its `ready` may start.
    func liveStreamClosed() {
        perform(machine.liveStreamClosed(now: elapsed()))
    }

    /// Asks for a run like `trigger(_:kind:)` and waits until the run that serves the
    /// trigger has finished; returns that run's number, or throws the run's error:
    /// ``FerryError/stopped(_:)`` if the scheduler stops first, ``FerryError/unreachable(_:underlying:)`` at once while
    /// offline (the trigger still runs when the network returns). Cancelling the caller stops
    /// the wait, not the run.
    @discardableResult
    package func run(for trigger: SyncTrigger, kind: SyncKind? = nil) async throws -> Int {
        try await wait(for: trigger, kind: kind, joiningRun: false).number
    }

    /// A client's `sync()`: joins the run in progress if it is of `kind` at least, else asks
    /// for the next (a `manual` trigger, which starts at once when nothing stands in the way),
    /// and returns the report of the run that served it. Cancelling the caller cancels the
    /// run its trigger started when nothing else asked for it (its batch goes back to the
    /// queue) and returns once that run has ended; a caller that joined or shares a run stops
    /// only its own wait, and one whose run has not started takes back what only it asked for.
    func sync(_ kind: SyncKind) async throws -> SyncReport {
        try await wait(for: .manual, kind: kind, joiningRun: true, ownsRun: true).report
    }

    /// Returns once a run has succeeded since the scheduler started: at once if one has, else
    /// with the run in progress (the launch run, typically), else with a new one asked for by
    /// `launch`. It never makes a run that launch already makes. Throws
    /// as `run(for:kind:)` does, at once while offline.
    public func initialSync() async throws {
        guard !machine.runSucceeded else { return }
        _ = try await wait(for: .launch, kind: nil, joiningRun: true)
    }

    private func wait(for trigger: SyncTrigger, kind: SyncKind?, joiningRun: Bool, ownsRun: Bool = false) async throws -> Served {
        let id = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard !Task.isCancelled else {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                waiters[id] = continuation
                // The run is the caller's own only if nothing else asked for it: a run that
                // serves a launch, a local change or another caller too is not cancelled with it.
                let alone = machine.run == nil && machine.pending == nil && waiters.count == 1
                perform(machine.wait(id, for: trigger, kind: kind, joiningRun: joiningRun, now: elapsed()))
                guard ownsRun, waiters[id] != nil else { return }  // answered at once (offline, stopped)
                syncCallers.insert(id)
                if alone { owners.insert(id) }
            }
        } onCancel: {
            Task { await self.stopWaiting(id) }
        }
    }

    /// A caller was cancelled: the run it owns is cancelled and tells it when it has ended; a
    /// `sync()` caller whose run has not started withdraws what only it asked for; any other
    /// wait ends at once.
    private func stopWaiting(_ id: UUID) {
        if owners.contains(id), machine.run?.callers.contains(id) == true, let running {
            running.cancel()
            return
        }
        if syncCallers.contains(id) { perform(machine.withdraw(id)) }
        resume([id], with: .failure(CancellationError()))
    }

    /// A connectivity monitor's report. The first one is a baseline; only offline → online triggers.
    public func connectivityChanged(online isOnline: Bool) {
        perform(machine.connectivityChanged(online: isOnline, now: elapsed()))
    }

    /// Whether the app is in the foreground; periodic runs happen only while it is.
    public func setActive(_ isActive: Bool) {
        perform(machine.setActive(isActive, now: elapsed()))
    }

    /// Stops the run in progress, if any, and returns once it has ended: its batch answered or
    /// back in the queue, nothing left in flight. Until the app is in front of its user again
    /// (`setActive(true)`, a `launch`, `becameActive` or `manual` trigger, a caller of `sync()`) or
    /// a new background task asks, no run starts; triggers are kept for then. For the end of a
    /// background task, when the app is about to be suspended; nothing is stopped or held if the
    /// app became active after `activation` (the count of `setActive(true)` calls it saw).
    func hold(unlessActivatedAfter activation: Int) async {
        guard let actions = machine.holdStarted(unlessActivatedAfter: activation) else { return }
        perform(actions)
        while let current = running {
            current.cancel()
            await current.value
        }
        perform(machine.holdFinished(now: elapsed()))
    }

    /// Stops: no new runs, the current one is cancelled and awaited, and callers waiting for a
    /// run get ``FerryError/stopped(_:)``.
    public func stop() async {
        perform(machine.stop())
        let current = running
        current?.cancel()
        await current?.value
        resume(Array(waiters.keys), with: .failure(stoppedError))
        events.finish()
        journalFeed?.finish()
        await journalWriter?.value
    }

    /// What the scheduler is doing about the triggers it holds, and until when.
    public var state: SchedulerState {
        machine.state(now: elapsed(), wallNow: Date())
    }

    // MARK: - Carrying out decisions

    private func perform(_ actions: [SchedulerStateMachine.Action]) {
        for action in actions {
            switch action {
            case .emit(let event): emit(event)
            case .startRun(let number, let kind): start(number, kind)
            case .armTimer(let due): arm(at: due)
            case .cancelTimer:
                timer?.cancel()
                timer = nil
            case .startPeriodic(let interval): startPeriodic(every: interval)
            case .stopPeriodic:
                periodic?.cancel()
                periodic = nil
            case .resume(let ids, let outcome): resume(ids, with: result(of: outcome))
            }
        }
    }

    private func start(_ number: Int, _ kind: SyncKind) {
        let runner = self.runner
        running = Task {
            do {
                self.finished(.success(try await runner(kind)))
            } catch {
                self.logFailure(number, error, heard: self.machine.run?.callers.isEmpty == false)
                self.finished(.failure(error))
            }
        }
    }

    private func finished(_ outcome: Result<SyncReport, any Error>) {
        running = nil
        var error: (any Error)?
        switch outcome {
        case .success(let report): runReport = report
        case .failure(let failure): error = failure
        }
        runError = error
        if let error = error as? FerryError, error.code == .updateRequired {
            updateRequired = error
            perform(machine.updateRequired())
        }
        perform(machine.runFinished(succeeded: error == nil, errorIsFerryError: error is FerryError, now: elapsed()))
        (runError, runReport) = (nil, nil)
    }

    private func result(of outcome: SchedulerStateMachine.WaiterOutcome) -> Result<Served, any Error> {
        switch outcome {
        case .ran(let number): .success(Served(number: number, report: runReport ?? SyncReport()))
        case .runFailed: .failure(runError ?? stoppedError)
        case .offline: .failure(Self.offlineError)
        case .held: .failure(Self.heldError)
        case .stopped: .failure(stoppedError)
        case .updateRequired: .failure(updateRequired ?? stoppedError)
        }
    }

    /// What the callers of a run get when `hold()` cut it short.
    private static let heldError = FerryError.interrupted("the background task's time ran out; the sync runs again when the app is active")

    /// What callers waiting for a run get when the scheduler stops before serving them.
    private static let stoppedError = FerryError.stopped("the scheduler was stopped (its user signed out)")

    private static let offlineError = FerryError.unreachable("offline; the sync runs when the network returns")

    private func resume(_ ids: [UUID], with outcome: Result<Served, any Error>) {
        for id in ids {
            owners.remove(id)
            syncCallers.remove(id)
            waiters.removeValue(forKey: id)?.resume(with: outcome)
        }
    }

    private func arm(at due: Duration) {
        timer?.cancel()
        let sleepUntil = self.sleepUntil
        timer = Task { [weak self] in
            do { try await sleepUntil(due) } catch { return }
            await self?.timerFired()
        }
    }

    private func timerFired() {
        perform(machine.timerFired(now: elapsed()))
    }

    private func startPeriodic(every interval: Duration) {
        periodic?.cancel()
        let sleepUntil = self.sleepUntil
        var next = elapsed() + interval
        periodic = Task { [weak self] in
            while !Task.isCancelled {
                do { try await sleepUntil(next) } catch { return }
                next += interval
                await self?.trigger(.periodic)
            }
        }
    }

    /// A warning only for what the app must act on (credentials refused, a store or server it
    /// must fix) and no caller was told (`heard`: a `sync()` caller gets the error itself, and a
    /// tool such as `ferry client sync` prints it); a network that is down or a sign-out passes
    /// with a later run, at debug level.
    private func logFailure(_ number: Int, _ error: any Error, heard: Bool) {
        let level: Logger.Level =
            switch error {
            case _ where heard: .debug
            case FerryError.Code.unauthorized, FerryError.Code.protocolViolation, FerryError.Code.invalidTable, FerryError.Code.unreadableStore:
                .warning
            case is DatabaseError: .warning  // the store itself: a full disk, a read-only container, damage
            default: .debug
            }
        logger.log(level: level, "sync run failed", metadata: ["run": "\(number)", "error": "\(error)"])
    }

    /// Sends `event` to observers, and to the journal stamped now, when it happens.
    private func emit(_ event: Event) {
        events.send(event)
        journalFeed?.yield((event, Date()))
    }
}

extension Clock where Duration == Swift.Duration {
    /// A client's scheduler on this clock (a member, so that a client's `any Clock` opens).
    func scheduler(
        configuration: SchedulerConfiguration,
        stoppedError: FerryError,
        reportingRunner runner: @escaping @Sendable (SyncKind) async throws -> SyncReport
    ) -> SyncScheduler {
        SyncScheduler(clock: self, configuration: configuration, stoppedError: stoppedError, reportingRunner: runner)
    }
}
