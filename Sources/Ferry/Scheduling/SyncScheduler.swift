import Foundation
import Logging

/// Tuning of the scheduler.
public struct SchedulerConfiguration: Sendable {
    /// Triggers this close together coalesce into one run; manual triggers use `manualSettleWindow`.
    public var settleWindow: Duration = .milliseconds(250)
    public var manualSettleWindow: Duration = .zero
    /// The least time from the end of one run to the start of the next. It delays runs, never drops them.
    public var minimumInterval: Duration = .seconds(2)
    /// Run periodically while the app is active; `nil` (the default) for never.
    public var periodicInterval: Duration?

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
        case trigger(SyncTrigger, TriggerFate)
        case runStarted(Int, SyncKind)
        case runFinished(Int, succeeded: Bool)
    }

    public typealias Runner = @Sendable (SyncKind) async throws -> Void

    private struct Request {
        var kind: SyncKind
        var triggers: [SyncTrigger]
        /// When the settle window closes, as time since the scheduler was made.
        var due: Duration
    }

    /// Time since the scheduler was made, on its clock.
    private let elapsed: @Sendable () -> Duration
    /// Sleeps on the scheduler's clock until that much time since it was made.
    private let sleepUntil: @Sendable (Duration) async throws -> Void
    private let configuration: SchedulerConfiguration
    private let runner: Runner
    private let logger = Logger(label: "ferry.scheduler")
    private var events: [UUID: AsyncStream<Event>.Continuation] = [:]
    private var journal: (@Sendable (Event) async -> Void)?

    private var pending: Request?
    private var running: Task<Void, Never>?
    private var runNumber = 0
    private var lastRunEnded: Duration?
    private var online: Bool?
    private var active = true
    private var timer: Task<Void, Never>?
    private var periodic: Task<Void, Never>?
    private var stopped = false
    public private(set) var history: [(SyncTrigger, TriggerFate)] = []

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
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
        let id = UUID()
        events[id] = continuation
        continuation.onTermination = { [weak self] _ in Task { await self?.dropObserver(id) } }
        return stream
    }

    /// Where events are written for people to read later.
    public func setJournal(_ journal: @escaping @Sendable (Event) async -> Void) {
        self.journal = journal
    }

    /// Asks for a run.
    public func trigger(_ trigger: SyncTrigger, kind: SyncKind? = nil) {
        guard !stopped else { return }
        let kind = kind ?? trigger.defaultKind
        let window = trigger == .manual ? configuration.manualSettleWindow : configuration.settleWindow
        let due = now + window
        if var request = pending {
            request.kind = max(request.kind, kind)
            request.triggers.append(trigger)
            request.due = min(request.due, due)
            pending = request
        } else {
            pending = Request(kind: kind, triggers: [trigger], due: due)
        }
        if running != nil {
            record(trigger, .queuedAfterRun(runNumber))
        } else if online == false {
            record(trigger, .waitingForNetwork)
        }
        evaluate()
    }

    /// A connectivity monitor's report. The first one is a baseline; only offline → online triggers.
    public func connectivityChanged(online isOnline: Bool) {
        guard !stopped else { return }
        let previous = online
        online = isOnline
        guard let previous else {
            emit(.trigger(.connectivityRestored, .ignored("first report (\(isOnline ? "online" : "offline")) is a baseline")))
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
    }

    /// Stops: no new runs, the current one is cancelled and awaited.
    public func stop() async {
        stopped = true
        pending = nil
        timer?.cancel()
        periodic?.cancel()
        let current = running
        current?.cancel()
        await current?.value
        for continuation in events.values { continuation.finish() }
        events.removeAll()
    }

    /// Starts periodic runs if configured.
    public func startPeriodic() {
        schedulePeriodic()
    }

    // MARK: - Deciding

    private var now: Duration { elapsed() }

    /// Starts a run if one is wanted and allowed now, else arms a timer for when it will be.
    private func evaluate() {
        guard !stopped, running == nil, let request = pending else { return }
        guard online != false else { return }
        var due = request.due
        if let lastRunEnded { due = max(due, lastRunEnded + configuration.minimumInterval) }
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
        let runner = self.runner
        running = Task {
            var succeeded = true
            do {
                try await runner(request.kind)
            } catch {
                succeeded = false
                self.logFailure(number, error)
            }
            self.finished(number, succeeded: succeeded)
        }
    }

    private func finished(_ number: Int, succeeded: Bool) {
        running = nil
        lastRunEnded = now
        emit(.runFinished(number, succeeded: succeeded))
        evaluate()
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
        guard active, !stopped, let interval = configuration.periodicInterval else { return }
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

    private func logFailure(_ number: Int, _ error: any Error) {
        logger.warning("sync run failed", metadata: ["run": "\(number)", "error": "\(error)"])
    }

    private func record(_ trigger: SyncTrigger, _ fate: TriggerFate) {
        history.append((trigger, fate))
        emit(.trigger(trigger, fate))
    }

    private func emit(_ event: Event) {
        for continuation in events.values { continuation.yield(event) }
        if let journal { Task { await journal(event) } }
    }

    private func dropObserver(_ id: UUID) {
        events[id] = nil
    }
}
