import Foundation

/// Every decision of ``SyncScheduler``, as a value: events in, actions out.
///
/// It holds no task and reads no clock: each event that depends on time carries `now` (time
/// since the scheduler was made), so its tests drive it synchronously, step by step. The actor
/// feeds it events and carries out the actions it returns, in order; it keeps only what cannot
/// be a value (the run's task, the timers, the continuations of callers waiting for a run).
struct SchedulerStateMachine {
    /// What the actor must do, in the order given.
    enum Action: Equatable {
        /// Send the event to observers and the journal.
        case emit(SyncScheduler.Event)
        /// Start run `number` of `kind`; report its end with ``SchedulerStateMachine/runFinished(succeeded:errorIsFerryError:now:)``.
        case startRun(number: Int, kind: SyncKind)
        /// Call ``SchedulerStateMachine/timerFired(now:)`` at `due` (replacing any armed timer).
        case armTimer(at: Duration)
        /// Disarm the timer.
        case cancelTimer
        /// Restart the periodic timer, which triggers `periodic` every `interval`.
        case startPeriodic(every: Duration)
        /// Stop the periodic timer.
        case stopPeriodic
        /// Resume the callers waiting with these ids.
        case resume([UUID], WaiterOutcome)
    }

    /// What a caller of ``SyncScheduler/run(for:kind:)`` gets.
    enum WaiterOutcome: Equatable {
        /// The run that served it finished, successfully.
        case ran(Int)
        /// The run that served it failed; the caller gets the run's error.
        case runFailed
        /// Offline: the run cannot start now (its trigger waits for the network).
        case offline
        /// A background task's time ran out (``SyncScheduler/hold(unlessActivatedAfter:)``).
        case held
        /// The scheduler stopped before serving it.
        case stopped
        /// The server requires an app update: no run serves it in this process.
        case updateRequired
    }

    /// Triggers waiting for the next run.
    struct Request: Equatable {
        var kind: SyncKind
        var triggers: [SyncTrigger]
        /// When the settle window closes.
        var due: Duration
        /// How many of `triggers` have been recorded as waiting for the network.
        var recordedOffline = 0
    }

    /// Whether runs may start.
    enum Gate: Equatable {
        case open
        /// A background task's time ran out (`holdStarted`): no run starts; triggers are kept.
        case held(Hold)
        /// For good (the user signed out): no run starts, no trigger is kept.
        case stopped
        /// The server requires an app update (`426 update_required`): no run starts in this
        /// process, no trigger is kept; the updated app is a new process.
        case updateRequired
    }

    enum Hold: Equatable {
        /// The run the hold cut short is still ending (`holdFinished` follows); what would lift
        /// the hold waits until then, and `releaseAfterwards` says whether something did.
        case stoppingRun(releaseAfterwards: Bool)
        /// No run in progress: held until the app is active again or a person waits.
        case settled
    }

    /// The run in progress.
    struct Run: Equatable {
        var number: Int
        var kind: SyncKind
        /// The callers it serves.
        var callers: [UUID]
        /// A hold cut it short: its callers are told so.
        var interrupted = false
    }

    let configuration: SchedulerConfiguration
    private(set) var gate = Gate.open
    private(set) var run: Run?
    private(set) var pending: Request?
    private(set) var runNumber = 0
    private(set) var runSucceeded = false
    private var lastRunEnded: Duration?
    /// The latest connectivity report; `nil` before the first.
    private(set) var online: Bool?
    private var active = true
    /// When the event stream began opening, until its `ready` or its end.
    private var streamOpening: Duration?
    /// How many times the app said it became active.
    private(set) var activations = 0
    /// Callers waiting for the next run.
    private var waitingForNextRun: [UUID] = []
    /// The latest triggers and their fates, oldest first; at most `historyCapacity`.
    private(set) var history: [(SyncTrigger, TriggerFate)] = []

    init(configuration: SchedulerConfiguration) {
        self.configuration = configuration
    }

    private var stopped: Bool { gate == .stopped }
    /// No run starts again: stopped, or an update is required.
    private var closed: Bool { gate == .stopped || gate == .updateRequired }

    // MARK: - Events

    /// A trigger asks for a run.
    mutating func trigger(_ trigger: SyncTrigger, kind: SyncKind?, now: Duration) -> [Action] {
        guard !closed else { return [] }
        var actions: [Action] = [.emit(.triggerReceived(trigger))]
        let kind = kind ?? trigger.defaultKind
        let due = now + settleWindow(of: trigger)
        if trigger.isForeground { releaseHold(&actions) }
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
        if let run { record(trigger, .queuedAfterRun(run.number), &actions) }
        evaluate(now: now, &actions)
        return actions
    }

    /// A caller waits for a run: the next one (`joiningRun` false, its trigger asks for it), or
    /// the one in progress if any and if it is of `kind` at least (`initialSync`, a client's
    /// `sync()`).
    mutating func wait(_ id: UUID, for trigger: SyncTrigger, kind: SyncKind?, joiningRun: Bool, now: Duration) -> [Action] {
        guard !closed else { return [.resume([id], stopped ? .stopped : .updateRequired)] }
        var actions: [Action] = []
        // A person waiting, or a new background task: the app runs (the trigger below evaluates).
        if trigger.isForeground || trigger == .backgroundTask { releaseHold(&actions) }
        // Not a run a hold is cutting short: its callers hear `held`, and a person waits for the next.
        if joiningRun, let run, !run.interrupted, run.kind >= kind ?? .incremental {
            self.run?.callers.append(id)
        } else {
            waitingForNextRun.append(id)
            actions += self.trigger(trigger, kind: kind, now: now)
        }
        return actions
    }

    /// A client's `sync()` caller was cancelled before its run started: it waits no more, and
    /// a request that only it asked for (a `manual` trigger nobody else waits for) is dropped,
    /// so a full pull asked for and given up does not run for nobody.
    mutating func withdraw(_ id: UUID) -> [Action] {
        guard let index = waitingForNextRun.firstIndex(of: id) else { return [] }
        waitingForNextRun.remove(at: index)
        guard waitingForNextRun.isEmpty, pending?.triggers == [.manual] else { return [] }
        pending = nil
        return [.cancelTimer]
    }

    /// The event stream opened (or opened again): changes made while it was closed may not
    /// have been pulled. A run already pending pulls after this; otherwise a `serverChange`
    /// asks for one.
    mutating func liveStreamOpened(now: Duration) -> [Action] {
        guard !closed else { return [] }
        let waited = streamOpening != nil
        streamOpening = nil
        guard pending == nil else {
            var actions: [Action] = []
            record(.serverChange, .ignored(.streamOpenedWithRunPending), &actions, keep: false)
            if waited { evaluate(now: now, &actions) }  // a run that waited for `ready` may start now
            return actions
        }
        return trigger(.serverChange, kind: nil, now: now)
    }

    /// The event stream began opening. A pending run that no one waits for waits for its
    /// `ready` (`liveOpeningWait` at most from now): its first pull request then goes out after
    /// the server registered the stream, so it covers what a second pull after `ready` would.
    mutating func liveStreamOpening(now: Duration) {
        streamOpening = now
    }

    /// The event stream failed or ended before `ready`: a run that waited for it may start.
    mutating func liveStreamClosed(now: Duration) -> [Action] {
        guard streamOpening != nil else { return [] }
        streamOpening = nil
        var actions: [Action] = []
        evaluate(now: now, &actions)
        return actions
    }

    /// A connectivity monitor's report. The first one is a baseline; only offline → online triggers.
    mutating func connectivityChanged(online isOnline: Bool, now: Duration) -> [Action] {
        guard !closed else { return [] }
        let previous = online
        online = isOnline
        var actions: [Action] = []
        guard let previous else {
            record(.connectivityRestored, .ignored(.baseline(online: isOnline)), &actions, keep: false)
            evaluate(now: now, &actions)  // an offline baseline puts what is pending on hold at once
            return actions
        }
        if !previous && isOnline { return trigger(.connectivityRestored, kind: nil, now: now) }
        record(.connectivityRestored, .ignored(isOnline ? .stillOnline : .wentOffline), &actions, keep: false)
        evaluate(now: now, &actions)
        return actions
    }

    /// Whether the app is in the foreground; periodic runs happen only while it is.
    mutating func setActive(_ isActive: Bool, now: Duration) -> [Action] {
        active = isActive
        var actions = [periodicAction]
        if isActive {
            activations += 1
            releaseHold(&actions)
            evaluate(now: now, &actions)
        } else if case .held(.stoppingRun) = gate {
            gate = .held(.stoppingRun(releaseAfterwards: false))  // back in the background before the hold was done: it stays
        }
        return actions
    }

    /// A background task's time ran out: hold runs unless the app became active after
    /// `activation` (or is already held). Returns `nil` when nothing is held; otherwise the
    /// actions, after which the actor stops the run in progress and calls `holdFinished`.
    mutating func holdStarted(unlessActivatedAfter activation: Int) -> [Action]? {
        guard gate == .open, activations == activation else { return nil }
        gate = .held(.stoppingRun(releaseAfterwards: false))
        run?.interrupted = true
        return [.emit(.held(true)), .cancelTimer]
    }

    /// The run a hold stopped has ended.
    mutating func holdFinished(now: Duration) -> [Action] {
        guard case .held(.stoppingRun(let releaseAfterwards)) = gate else { return [] }
        gate = .held(.settled)
        var actions: [Action] = []
        if releaseAfterwards {  // the app came back meanwhile: its callers get their run
            releaseHold(&actions)
            evaluate(now: now, &actions)
        } else {
            // Callers waiting for the next run would wait until the app is active: tell them now.
            if !waitingForNextRun.isEmpty { actions.append(.resume(waitingForNextRun, .held)) }
            waitingForNextRun = []
        }
        return actions
    }

    /// The settle window or the minimum interval has passed.
    mutating func timerFired(now: Duration) -> [Action] {
        var actions: [Action] = []
        evaluate(now: now, &actions)
        return actions
    }

    /// The run in progress ended.
    mutating func runFinished(succeeded: Bool, errorIsFerryError: Bool, now: Duration) -> [Action] {
        guard let run else { return [] }
        self.run = nil
        let number = run.number
        lastRunEnded = now
        if succeeded { runSucceeded = true }
        // A run cut short by a stop did not fail its callers: their user signed out. (One that
        // succeeded before the stop was heard is a success.) One cut short by a hold was
        // interrupted, which its callers can tell from a failure.
        let outcome: WaiterOutcome =
            if succeeded { .ran(number) } else if stopped { .stopped } else if run.interrupted && !errorIsFerryError { .held } else { .runFailed }
        var actions: [Action] = []
        if !run.callers.isEmpty { actions.append(.resume(run.callers, outcome)) }
        actions.append(.emit(.runFinished(number, succeeded: succeeded)))
        evaluate(now: now, &actions)
        return actions
    }

    /// The scheduler stops: no new runs, and the callers no run will serve are told. The run in
    /// progress, if any, still reports its end (its callers learn `stopped` then).
    mutating func stop() -> [Action] {
        close(.stopped)
    }

    /// The server requires an app update: as `stop()`, but the callers no run will serve learn
    /// why, and so does every caller after. Reported before the run that heard it ends.
    mutating func updateRequired() -> [Action] {
        stopped ? [] : close(.updateRequired)
    }

    private mutating func close(_ gate: Gate) -> [Action] {
        self.gate = gate
        pending = nil
        var actions: [Action] = [.cancelTimer, .stopPeriodic]
        if !waitingForNextRun.isEmpty { actions.append(.resume(waitingForNextRun, gate == .stopped ? .stopped : .updateRequired)) }
        waitingForNextRun = []
        return actions
    }

    // MARK: - State

    /// What the scheduler is doing about the triggers it holds, and until when (`wallNow` is the date at `now`).
    func state(now: Duration, wallNow: Date) -> SchedulerState {
        if stopped { return .stopped }
        if gate == .updateRequired { return .updateRequired }
        if run != nil { return .running(queued: pending?.triggers.count ?? 0) }
        if case .held = gate { return .held(triggers: pending?.triggers.count ?? 0) }
        guard let pending else { return .idle }
        if online == false { return .waitingForNetwork(triggers: pending.triggers.count) }
        let interval = minimumInterval(of: pending)
        let afterInterval = interval == .zero ? nil : lastRunEnded.map { $0 + interval }
        let due = max(pending.due, afterInterval ?? pending.due, waitForStream(pending) ?? pending.due)
        let until = wallNow.addingTimeInterval(max(0, (due - now).seconds))
        if let afterInterval, afterInterval > pending.due { return .waitingForMinimumInterval(triggers: pending.triggers.count, until: until) }
        return .settling(triggers: pending.triggers.count, until: until)
    }

    // MARK: - Deciding

    /// Starts a run if one is wanted and allowed now, else arms a timer for when it will be.
    private mutating func evaluate(now: Duration, _ actions: inout [Action]) {
        guard gate == .open, run == nil, var request = pending else { return }
        guard online != false else {
            for trigger in request.triggers[request.recordedOffline...] { record(trigger, .waitingForNetwork, &actions) }
            // Callers are told at once, not left waiting for a network that may be gone for
            // hours; their triggers still run when it returns.
            if !waitingForNextRun.isEmpty { actions.append(.resume(waitingForNextRun, .offline)) }
            waitingForNextRun = []
            request.recordedOffline = request.triggers.count
            pending = request
            return
        }
        var due = request.due
        if let lastRunEnded { due = max(due, lastRunEnded + minimumInterval(of: request)) }
        if let wait = waitForStream(request) { due = max(due, wait) }
        if now < due {
            actions.append(.armTimer(at: due))
            return
        }
        pending = nil
        actions.append(.cancelTimer)
        runNumber += 1
        for (index, trigger) in request.triggers.enumerated() {
            record(trigger, index == 0 ? .startedRun(runNumber) : .coalescedIntoRun(runNumber), &actions)
        }
        actions.append(.emit(.runStarted(runNumber, request.kind)))
        run = Run(number: runNumber, kind: request.kind, callers: waitingForNextRun)
        waitingForNextRun = []
        actions.append(.startRun(number: runNumber, kind: request.kind))
    }

    /// Until when `request` waits for the opening event stream's `ready`; `nil` when it does not
    /// (no stream opening, or someone waits for the run).
    private func waitForStream(_ request: Request) -> Duration? {
        guard let streamOpening, !request.triggers.contains(where: \.settlesAtOnce) else { return nil }
        return streamOpening + configuration.liveOpeningWait
    }

    /// Lets runs start again after a hold (while it is still stopping the run, once it has);
    /// the caller evaluates.
    private mutating func releaseHold(_ actions: inout [Action]) {
        switch gate {
        case .open, .stopped, .updateRequired:
            return
        case .held(.stoppingRun):
            gate = .held(.stoppingRun(releaseAfterwards: true))
        case .held(.settled):
            gate = .open
            actions.append(.emit(.held(false)))
        }
    }

    private var periodicAction: Action {
        // A second at least: a zero or negative interval would trigger in a hot loop.
        guard active, !closed, let interval = configuration.periodicInterval else { return .stopPeriodic }
        return .startPeriodic(every: max(interval, .seconds(1)))
    }

    private func settleWindow(of trigger: SyncTrigger) -> Duration {
        if trigger.settlesAtOnce { return configuration.manualSettleWindow }
        if trigger == .serverChange { return configuration.liveSettleWindow }
        return configuration.settleWindow
    }

    /// The least time after the last run before this request's: none when a person waits for it
    /// (a manual sync right after a write), the live interval for a server's change, the
    /// minimum interval otherwise. A background task's runs keep it: it runs again while
    /// anything is left, and the interval paces that loop.
    private func minimumInterval(of request: Request) -> Duration {
        request.triggers.map { trigger in
            switch trigger {
            case .manual: .zero
            case .serverChange: configuration.liveMinimumInterval
            default: configuration.minimumInterval
            }
        }.min() ?? configuration.minimumInterval
    }

    /// Records a trigger's fate: in `history` unless `keep` is false (connectivity reports that
    /// change nothing, which only the events show).
    private mutating func record(_ trigger: SyncTrigger, _ fate: TriggerFate, _ actions: inout [Action], keep: Bool = true) {
        if keep {
            let capacity = max(1, configuration.historyCapacity)
            history.append((trigger, fate))
            if history.count > capacity { history.removeFirst(history.count - capacity) }
        }
        actions.append(.emit(.trigger(trigger, fate)))
    }
}
