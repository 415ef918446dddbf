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
    /// Run periodically while the app is active, at least a second apart; `nil` (the default) for never.
    /// The timer starts with `SyncScheduler.setActive(true)` (a session calls it for each user it signs in).
    public var periodicInterval: Duration?
    /// Trigger fates kept in `SyncScheduler.history`; older ones are dropped first.
    public var historyCapacity = 1_000

    /// The defaults: a 250 ms settle window (none for manual triggers), 2 s between runs, no periodic runs, and the
    /// latest 1,000 trigger fates kept.
    public init() {}
}

/// The only thing that starts a sync run.
///
/// Any burst of triggers yields one run; triggers during a run yield exactly one
/// follow-up run; nothing is ever dropped, only delayed (settle window, minimum
/// interval, offline). Every trigger's fate is recorded.
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

    private struct Request {
        var kind: SyncKind
        var triggers: [SyncTrigger]
        /// When the settle window closes, as time since the scheduler was made.
        var due: Duration
        /// How many of `triggers` have been recorded as waiting for the network.
        var recordedOffline = 0

        /// The minimum interval spaces automatic runs; a person waiting for this one (a manual
        /// sync right after a write) does not wait it out. A background task's runs keep it: it
        /// runs again while anything is left, and the interval paces that loop.
        var waitsForMinimumInterval: Bool { !triggers.contains(.manual) }
    }

    /// Time since the scheduler was made, on its clock.
    private let elapsed: @Sendable () -> Duration
    /// Sleeps on the scheduler's clock until that much time since it was made.
    private let sleepUntil: @Sendable (Duration) async throws -> Void
    private let configuration: SchedulerConfiguration
    private let runner: Runner
    private let logger = Logger(label: "ferry.scheduler")
    private let events = Broadcast<Event>()
    /// Events for the journal, written in order by one task.
    private var journalFeed: AsyncStream<(Event, Date)>.Continuation?
    private var journalWriter: Task<Void, Never>?

    private var pending: Request?
    private var running: Task<Void, Never>?
    private var runningKind: SyncKind?
    private var runSucceeded = false
    private var runNumber = 0
    private var lastRunEnded: Duration?
    /// The latest connectivity report; `nil` before the first.
    private(set) var online: Bool?
    private var active = true
    private var timer: Task<Void, Never>?
    private var periodic: Task<Void, Never>?
    private var stopped = false
    /// No run starts while held (see `hold()`); triggers are kept.
    private var held = false
    /// `hold()` is stopping runs: what would lift the hold waits until it has returned.
    private var holding = false
    private var releaseAfterHold = false
    /// How many times the app said it became active: a background sync that started before the
    /// latest does not hold runs the app in front of its user is making.
    private(set) var activations = 0
    /// The run in progress was cut short by `hold()`: its callers are told so.
    private var runInterrupted = false
    /// Callers of `run(for:kind:)`: those waiting for the next run, and those the current run serves.
    private var waiters: [UUID: CheckedContinuation<Int, any Error>] = [:]
    private var waitingForNextRun: [UUID] = []
    private var servedByCurrentRun: [UUID] = []
    /// The latest triggers and their fates, oldest first; at most `historyCapacity`.
    public private(set) var history: [(SyncTrigger, TriggerFate)] = []

    /// A scheduler that calls `runner` for each run and times settle windows, the minimum interval and periodic runs
    /// on `clock`. It starts no run until something triggers one.
    public init<C: Clock>(clock: C, configuration: SchedulerConfiguration = SchedulerConfiguration(), runner: @escaping Runner)
    where C.Duration == Duration {
        let start = clock.now
        self.elapsed = { start.duration(to: clock.now) }
        self.sleepUntil = { offset in try await clock.sleep(until: start.advanced(by: offset), tolerance: nil) }
        self.configuration = configuration
        self.runner = runner
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
        guard !stopped else { return }
        let kind = kind ?? trigger.defaultKind
        let window = trigger.settlesAtOnce ? configuration.manualSettleWindow : configuration.settleWindow
        let due = now + window
        emit(.triggerReceived(trigger))
        if trigger.isForeground { releaseHold() }  // evaluated below (once hold() is done, if it is stopping runs)
        if var request = pending {
            request.kind = max(request.kind, kind)
            request.triggers.append(trigger)
            // A returning link settles for a whole window (it may flap again); any other
            // trigger only ever brings the run closer.
            request.due = trigger == .connectivityRestored ? max(request.due, due) : min(request.due, due)
            pending = request
        } else {
            pending = Request(kind: kind, triggers: [trigger], due: due)
        }
        if running != nil {
            record(trigger, .queuedAfterRun(runNumber))
        }
        evaluate()
    }

    /// Asks for a run like `trigger(_:kind:)` and waits until the run that serves the
    /// trigger has finished; returns that run's number, or throws the run's error:
    /// `FerryError.stopped` if the scheduler stops first, `FerryError.unreachable` at once while
    /// offline (the trigger still runs when the network returns). Cancelling the caller stops
    /// the wait, not the run.
    @discardableResult
    public func run(for trigger: SyncTrigger, kind: SyncKind? = nil) async throws -> Int {
        try await wait(for: trigger, kind: kind, joiningRun: false)
    }

    /// Returns once a run has succeeded since the scheduler started: at once if one has, else
    /// with the run in progress (the launch run, typically), else with a new one asked for by
    /// `launch`. It never makes a run that launch already makes. Throws
    /// as `run(for:kind:)` does, at once while offline.
    public func initialSync() async throws {
        guard !runSucceeded else { return }
        _ = try await wait(for: .launch, kind: nil, joiningRun: true)
    }

    private func wait(for trigger: SyncTrigger, kind: SyncKind?, joiningRun: Bool) async throws -> Int {
        let id = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard !stopped else {
                    continuation.resume(throwing: Self.stoppedError)
                    return
                }
                guard !Task.isCancelled else {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                waiters[id] = continuation
                // A person waiting, or a new background task: the app runs (the trigger below evaluates).
                if trigger.isForeground || trigger == .backgroundTask { releaseHold() }
                if joiningRun, runningKind != nil {
                    servedByCurrentRun.append(id)
                } else {
                    waitingForNextRun.append(id)
                    self.trigger(trigger, kind: kind)
                }
            }
        } onCancel: {
            Task { await self.resumeWaiter(id, with: .failure(CancellationError())) }
        }
    }

    /// A connectivity monitor's report. The first one is a baseline; only offline → online triggers.
    public func connectivityChanged(online isOnline: Bool) {
        guard !stopped else { return }
        let previous = online
        online = isOnline
        guard let previous else {
            emit(.trigger(.connectivityRestored, .ignored("first report (\(isOnline ? "online" : "offline")) is a baseline")))
            evaluate()  // an offline baseline puts what is pending on hold at once
            return
        }
        if !previous && isOnline {
            trigger(.connectivityRestored)
        } else {
            emit(.trigger(.connectivityRestored, .ignored(isOnline ? "still online" : "went offline")))
            evaluate()
        }
    }

    /// Whether the app is in the foreground; periodic runs happen only while it is.
    public func setActive(_ isActive: Bool) {
        active = isActive
        schedulePeriodic()
        if isActive {
            activations += 1
            releaseHold()
            evaluate()
        } else {
            releaseAfterHold = false  // back in the background before the hold was done: it stays
        }
    }

    /// Stops the run in progress, if any, and returns once it has ended: its batch answered or
    /// back in the queue, nothing left in flight. Until the app is in front of its user again
    /// (`setActive(true)`, a `launch`, `becameActive` or `manual` trigger, a caller of `sync()`) or
    /// a new background task asks, no run starts; triggers are kept for then. For the end of a
    /// background task, when the app is about to be suspended; nothing is stopped or held if the
    /// app became active after `activation` (the count of `setActive(true)` calls it saw).
    func hold(unlessActivatedAfter activation: Int) async {
        guard !stopped, !held, activations == activation else { return }
        held = true
        emit(.held(true))
        holding = true
        timer?.cancel()
        timer = nil
        while let current = running {
            runInterrupted = true
            current.cancel()
            await current.value
        }
        holding = false
        if releaseAfterHold {  // the app came back meanwhile: its callers get their run
            releaseHold()
            evaluate()
        } else {
            // Callers waiting for the next run would wait until the app is active: tell them now.
            for id in waitingForNextRun { resumeWaiter(id, with: .failure(Self.heldError)) }
            waitingForNextRun = []
        }
    }

    /// Lets runs start again after `hold()` (while it is still stopping runs, once it has);
    /// the caller evaluates.
    private func releaseHold() {
        guard held else { return }
        guard !holding else {
            releaseAfterHold = true
            return
        }
        held = false
        releaseAfterHold = false
        emit(.held(false))
    }

    /// What the callers of a run get when `hold()` cut it short.
    private static let heldError = FerryError.interrupted("the background task's time ran out; the sync runs again when the app is active")

    /// What callers waiting for a run get when the scheduler stops before serving them.
    private static let stoppedError = FerryError.stopped("the scheduler was stopped (its user signed out)")

    /// Stops: no new runs, the current one is cancelled and awaited, and callers waiting for a
    /// run get `FerryError.stopped`.
    public func stop() async {
        stopped = true
        pending = nil
        timer?.cancel()
        periodic?.cancel()
        let current = running
        current?.cancel()
        await current?.value
        for id in Array(waiters.keys) { resumeWaiter(id, with: .failure(Self.stoppedError)) }
        events.finish()
        journalFeed?.finish()
        await journalWriter?.value
    }

    /// What the scheduler is doing about the triggers it holds, and until when.
    public var state: SchedulerState {
        if stopped { return .stopped }
        if running != nil { return .running(queued: pending?.triggers.count ?? 0) }
        if held { return .held(triggers: pending?.triggers.count ?? 0) }
        guard let pending else { return .idle }
        if online == false { return .waitingForNetwork(triggers: pending.triggers.count) }
        let afterInterval = pending.waitsForMinimumInterval ? lastRunEnded.map { $0 + configuration.minimumInterval } : nil
        let due = max(pending.due, afterInterval ?? pending.due)
        let until = Date().addingTimeInterval(max(0, (due - now).seconds))
        if let afterInterval, afterInterval > pending.due { return .waitingForMinimumInterval(triggers: pending.triggers.count, until: until) }
        return .settling(triggers: pending.triggers.count, until: until)
    }

    // MARK: - Deciding

    private var now: Duration { elapsed() }

    /// Starts a run if one is wanted and allowed now, else arms a timer for when it will be.
    private func evaluate() {
        guard !stopped, !held, running == nil, var request = pending else { return }
        guard online != false else {
            for trigger in request.triggers[request.recordedOffline...] { record(trigger, .waitingForNetwork) }
            failWaitersWhileOffline()
            request.recordedOffline = request.triggers.count
            pending = request
            return
        }
        var due = request.due
        if let lastRunEnded, request.waitsForMinimumInterval { due = max(due, lastRunEnded + configuration.minimumInterval) }
        if now < due {
            arm(at: due)
            return
        }
        pending = nil
        timer?.cancel()
        timer = nil
        runNumber += 1
        let number = runNumber
        for (index, trigger) in request.triggers.enumerated() {
            record(trigger, index == 0 ? .startedRun(number) : .coalescedIntoRun(number))
        }
        emit(.runStarted(number, request.kind))
        servedByCurrentRun = waitingForNextRun
        waitingForNextRun = []
        runningKind = request.kind
        let runner = self.runner
        running = Task {
            let outcome: Result<Int, any Error>
            do {
                try await runner(request.kind)
                outcome = .success(number)
            } catch {
                outcome = .failure(error)
                self.logFailure(number, error)
            }
            self.finished(number, outcome)
        }
    }

    private func finished(_ number: Int, _ outcome: Result<Int, any Error>) {
        running = nil
        lastRunEnded = now
        if case .success = outcome { runSucceeded = true }
        runningKind = nil
        // A run cut short by stop() did not fail its callers: their user signed out. (One that
        // succeeded before stop() was heard is a success.)
        // One cut short by hold() was interrupted, which its callers can tell from a failure.
        let served: Result<Int, any Error> =
            switch outcome {
            case .failure where stopped: .failure(Self.stoppedError)
            case .failure(let error) where runInterrupted && !(error is FerryError): .failure(Self.heldError)
            default: outcome
            }
        for id in servedByCurrentRun { resumeWaiter(id, with: served) }
        servedByCurrentRun = []
        runInterrupted = false
        emit(.runFinished(number, succeeded: (try? outcome.get()) != nil))
        evaluate()
    }

    /// Callers waiting for a run that cannot start while offline are told at once, not left
    /// waiting for a network that may be gone for hours; their triggers still run when it returns.
    private func failWaitersWhileOffline() {
        for id in waitingForNextRun { resumeWaiter(id, with: .failure(Self.offlineError)) }
        waitingForNextRun = []
    }

    private static let offlineError = FerryError.unreachable("offline; the sync runs when the network returns")

    private func resumeWaiter(_ id: UUID, with outcome: Result<Int, any Error>) {
        waiters.removeValue(forKey: id)?.resume(with: outcome)
    }

    private func arm(at due: Duration) {
        timer?.cancel()
        let sleepUntil = self.sleepUntil
        timer = Task { [weak self] in
            do { try await sleepUntil(due) } catch { return }
            await self?.evaluate()
        }
    }

    private func schedulePeriodic() {
        periodic?.cancel()
        periodic = nil
        // A second at least: a zero or negative interval would trigger in a hot loop.
        guard active, !stopped, let interval = configuration.periodicInterval.map({ max($0, .seconds(1)) }) else { return }
        let sleepUntil = self.sleepUntil
        var next = now + interval
        periodic = Task { [weak self] in
            while !Task.isCancelled {
                do { try await sleepUntil(next) } catch { return }
                next += interval
                await self?.trigger(.periodic)
            }
        }
    }

    /// A warning only for what the app must act on (credentials refused, a store or server it
    /// must fix); a network that is down or a sign-out passes with a later run, at debug level.
    private func logFailure(_ number: Int, _ error: any Error) {
        let level: Logger.Level =
            switch error {
            case FerryError.unauthorized, FerryError.protocolViolation, FerryError.invalidTable, FerryError.unreadableStore: .warning
            case is DatabaseError: .warning  // the store itself: a full disk, a read-only container, damage
            default: .debug
            }
        logger.log(level: level, "sync run failed", metadata: ["run": "\(number)", "error": "\(error)"])
    }

    private func record(_ trigger: SyncTrigger, _ fate: TriggerFate) {
        history.append((trigger, fate))
        if history.count > max(1, configuration.historyCapacity) {
            history.removeFirst(history.count - max(1, configuration.historyCapacity))
        }
        emit(.trigger(trigger, fate))
    }

    /// Sends `event` to observers, and to the journal stamped now, when it happens.
    private func emit(_ event: Event) {
        events.send(event)
        journalFeed?.yield((event, Date()))
    }
}
