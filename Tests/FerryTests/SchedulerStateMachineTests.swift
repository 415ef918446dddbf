import Foundation
import Testing

@testable import Ferry

/// The scheduler's decisions, driven one event at a time: no clock, no task, no server.
@Suite("Scheduler state machine")
struct SchedulerStateMachineTests {
    typealias Machine = SchedulerStateMachine

    static func machine(_ configure: (inout SchedulerConfiguration) -> Void = { _ in }) -> Machine {
        var configuration = SchedulerConfiguration()
        configure(&configuration)
        return Machine(configuration: configuration)
    }

    static func started(_ actions: [Machine.Action]) -> [Int] {
        actions.compactMap { if case .startRun(let number, _) = $0 { number } else { nil } }
    }

    static func timer(_ actions: [Machine.Action]) -> Duration? {
        actions.compactMap { if case .armTimer(let due) = $0 { due } else { nil } }.last
    }

    @Test("a burst settles into one run when the window closes; triggers during it make exactly one follow-up after the minimum interval")
    func burstAndFollowUp() {
        var machine = Self.machine()
        #expect(Self.timer(machine.trigger(.launch, kind: nil, now: .zero)) == .milliseconds(250))
        #expect(Self.timer(machine.trigger(.becameActive, kind: nil, now: .milliseconds(100))) == .milliseconds(250))
        #expect(Self.started(machine.timerFired(now: .milliseconds(250))) == [1])
        #expect(machine.history.map(\.1) == [.startedRun(1), .coalescedIntoRun(1)])
        // During run 1: queued, no run while it goes.
        for trigger in [SyncTrigger.localChange, .localChange, .periodic] {
            let actions = machine.trigger(trigger, kind: nil, now: .milliseconds(300))
            #expect(Self.started(actions).isEmpty)
            #expect(actions.contains(.emit(.trigger(trigger, .queuedAfterRun(1)))))
        }
        // It ends at 1 s: the follow-up waits for the minimum interval (2 s after that).
        let finished = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .seconds(1))
        #expect(finished.contains(.emit(.runFinished(1, succeeded: true))))
        #expect(Self.timer(finished) == .seconds(3))
        #expect(
            machine.state(now: .seconds(1), wallNow: Date(timeIntervalSince1970: 0))
                == .waitingForMinimumInterval(triggers: 3, until: Date(timeIntervalSince1970: 2))
        )
        #expect(Self.started(machine.timerFired(now: .seconds(3))) == [2])
        #expect(Self.started(machine.runFinished(succeeded: true, errorIsFerryError: false, now: .seconds(4))).isEmpty)
        #expect(machine.state(now: .seconds(4), wallNow: Date()) == .idle)
    }

    @Test("a server's change settles for the live window and waits the live interval; a manual sync waits for neither")
    func liveAndManualPacing() {
        var machine = Self.machine()
        #expect(Self.timer(machine.trigger(.serverChange, kind: nil, now: .zero)) == .milliseconds(20))
        #expect(Self.started(machine.timerFired(now: .milliseconds(20))) == [1])
        _ = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .milliseconds(50))
        // 250 ms after the run, not 2 s.
        #expect(Self.timer(machine.trigger(.serverChange, kind: nil, now: .milliseconds(60))) == .milliseconds(300))
        // A local change joins it: the request keeps the shortest interval among its triggers.
        #expect(Self.timer(machine.trigger(.localChange, kind: nil, now: .milliseconds(70))) == .milliseconds(300))
        #expect(Self.started(machine.timerFired(now: .milliseconds(300))) == [2])
        _ = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .milliseconds(400))
        #expect(Self.started(machine.trigger(.manual, kind: nil, now: .milliseconds(401))) == [3])
    }

    @Test("the stream opening asks for a run only when none is pending; a run in progress still gets its follow-up")
    func liveStreamOpened() {
        var machine = Self.machine()
        _ = machine.trigger(.launch, kind: nil, now: .zero)
        let whilePending = machine.liveStreamOpened(now: .milliseconds(5))
        #expect(whilePending == [.emit(.trigger(.serverChange, .ignored(.streamOpenedWithRunPending)))])
        #expect(Self.started(machine.timerFired(now: .milliseconds(250))) == [1])
        let whileRunning = machine.liveStreamOpened(now: .milliseconds(260))
        #expect(whileRunning.contains(.emit(.trigger(.serverChange, .queuedAfterRun(1)))))
        _ = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .milliseconds(300))
        #expect(Self.started(machine.timerFired(now: .milliseconds(550))) == [2])
        _ = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .seconds(1))
        #expect(Self.timer(machine.liveStreamOpened(now: .seconds(5))) == .seconds(5) + .milliseconds(20))
    }

    @Test("offline: triggers wait, callers hear at once; the link's return settles a whole window and runs them")
    func offline() {
        var machine = Self.machine()
        _ = machine.connectivityChanged(online: false, now: .zero)
        let id = UUID()
        let actions = machine.wait(id, for: .manual, kind: nil, joiningRun: false, now: .zero)
        #expect(actions.contains(.resume([id], .offline)))
        #expect(actions.contains(.emit(.trigger(.manual, .waitingForNetwork))))
        #expect(machine.state(now: .zero, wallNow: Date()) == .waitingForNetwork(triggers: 1))
        #expect(Self.timer(machine.connectivityChanged(online: true, now: .seconds(10))) == .seconds(10) + .milliseconds(250))
        #expect(Self.started(machine.timerFired(now: .seconds(10) + .milliseconds(250))) == [1])
    }

    @Test("a hold stops the run and keeps triggers; callers of the interrupted run hear held, the app's return runs what was kept")
    func hold() {
        var machine = Self.machine()
        let id = UUID()
        #expect(Self.started(machine.wait(id, for: .backgroundTask, kind: nil, joiningRun: false, now: .zero)) == [1])
        let holding = machine.holdStarted(unlessActivatedAfter: 0)
        #expect(holding == [.emit(.held(true)), .cancelTimer])
        #expect(machine.holdStarted(unlessActivatedAfter: 0) == nil)  // held already
        #expect(machine.runFinished(succeeded: false, errorIsFerryError: false, now: .seconds(1)).contains(.resume([id], .held)))
        _ = machine.holdFinished(now: .seconds(1))
        #expect(Self.started(machine.trigger(.localChange, kind: nil, now: .seconds(2))).isEmpty)
        #expect(machine.state(now: .seconds(2), wallNow: Date()) == .held(triggers: 1))
        let active = machine.setActive(true, now: .seconds(5))
        #expect(active.contains(.emit(.held(false))))
        #expect(Self.started(active) == [2])
    }

    @Test(
        "a client's sync() joins the run in progress only if it is of its kind: a full sync during an incremental run is served by the next, full run"
    )
    func joinByKind() {
        var machine = Self.machine()
        let first = UUID()
        #expect(Self.started(machine.wait(first, for: .manual, kind: .incremental, joiningRun: true, now: .zero)) == [1])
        let incremental = UUID()
        #expect(machine.wait(incremental, for: .manual, kind: .incremental, joiningRun: true, now: .zero).isEmpty)
        #expect(machine.run?.callers == [first, incremental], "joined the run in progress: no trigger, no second run")
        let full = UUID()
        _ = machine.wait(full, for: .manual, kind: .full, joiningRun: true, now: .zero)
        #expect(machine.run?.callers == [first, incremental])
        let ended = machine.runFinished(succeeded: true, errorIsFerryError: false, now: .seconds(1))
        #expect(ended.contains(.resume([first, incremental], .ran(1))))
        #expect(ended.contains(.startRun(number: 2, kind: .full)), "a manual sync keeps no minimum interval")
        #expect(machine.run == SchedulerStateMachine.Run(number: 2, kind: .full, callers: [full]))
        let joiningFull = UUID()
        _ = machine.wait(joiningFull, for: .manual, kind: .full, joiningRun: true, now: .seconds(1))
        #expect(machine.run?.callers == [full, joiningFull])
        let initial = UUID()
        _ = machine.wait(initial, for: .launch, kind: nil, joiningRun: true, now: .seconds(1))
        #expect(machine.run?.callers == [full, joiningFull, initial], "initialSync joins any run")
    }

    @Test("a sync() given up before its run starts takes back the request only it made; a run a hold is cutting short is joined by nobody")
    func withdrawAndInterrupted() {
        var machine = Self.machine()
        _ = machine.wait(UUID(), for: .manual, kind: .incremental, joiningRun: true, now: .zero)
        let full = UUID()
        _ = machine.wait(full, for: .manual, kind: .full, joiningRun: true, now: .zero)
        #expect(machine.pending?.triggers == [.manual])
        #expect(machine.withdraw(full) == [.cancelTimer])
        #expect(machine.pending == nil, "no full pull for nobody")
        #expect(Self.started(machine.runFinished(succeeded: true, errorIsFerryError: false, now: .seconds(1))).isEmpty)

        let first = UUID()
        _ = machine.wait(first, for: .manual, kind: .incremental, joiningRun: true, now: .seconds(2))
        let other = UUID()
        _ = machine.trigger(.localChange, kind: nil, now: .seconds(2))
        _ = machine.wait(other, for: .manual, kind: .full, joiningRun: true, now: .seconds(2))
        #expect(machine.withdraw(other).isEmpty && machine.pending?.triggers == [.localChange, .manual], "another trigger keeps the request")

        _ = machine.holdStarted(unlessActivatedAfter: machine.activations)
        let person = UUID()
        _ = machine.wait(person, for: .manual, kind: nil, joiningRun: true, now: .seconds(3))
        #expect(machine.run?.callers == [first], "not joined to the run the hold cuts short")
        #expect(machine.runFinished(succeeded: false, errorIsFerryError: false, now: .seconds(4)).contains(.resume([first], .held)))
        #expect(Self.started(machine.holdFinished(now: .seconds(4))) == [3], "the person's run follows")
    }

    @Test("a stop answers every waiting caller and starts nothing more; the run in progress tells its callers stopped")
    func stop() {
        var machine = Self.machine()
        let running = UUID()
        let next = UUID()
        _ = machine.wait(running, for: .manual, kind: nil, joiningRun: false, now: .zero)
        _ = machine.wait(next, for: .manual, kind: nil, joiningRun: false, now: .zero)
        #expect(machine.stop().contains(.resume([next], .stopped)))
        #expect(machine.runFinished(succeeded: false, errorIsFerryError: false, now: .seconds(1)).contains(.resume([running], .stopped)))
        #expect(machine.trigger(.manual, kind: nil, now: .seconds(2)).isEmpty)
        #expect(machine.wait(UUID(), for: .manual, kind: nil, joiningRun: false, now: .seconds(2)).count == 1)
    }

    @Test("update required closes the gate: the failing run's callers get its error, later triggers are dropped unrecorded, later callers hear why")
    func updateRequired() {
        var machine = Self.machine { $0.periodicInterval = .seconds(5) }
        _ = machine.setActive(true, now: .zero)
        let running = UUID()
        let next = UUID()
        _ = machine.wait(running, for: .manual, kind: nil, joiningRun: false, now: .zero)
        _ = machine.wait(next, for: .manual, kind: nil, joiningRun: false, now: .zero)
        let closing = machine.updateRequired()
        #expect(closing.contains(.resume([next], .updateRequired)) && closing.contains(.stopPeriodic))
        #expect(machine.runFinished(succeeded: false, errorIsFerryError: true, now: .seconds(1)).contains(.resume([running], .runFailed)))
        #expect(machine.trigger(.localChange, kind: nil, now: .seconds(2)).isEmpty)
        #expect(machine.connectivityChanged(online: true, now: .seconds(2)).isEmpty)
        #expect(machine.setActive(true, now: .seconds(2)) == [.stopPeriodic])
        let later = UUID()
        #expect(machine.wait(later, for: .manual, kind: nil, joiningRun: false, now: .seconds(3)) == [.resume([later], .updateRequired)])
        #expect(machine.state(now: .seconds(3), wallNow: Date()) == .updateRequired)
        #expect(machine.stop().isEmpty == false)
        #expect(machine.state(now: .seconds(3), wallNow: Date()) == .stopped, "a sign-out after it stops as ever")
    }

    @Test("periodic runs only while active, at least a second apart")
    func periodic() {
        var machine = Self.machine { $0.periodicInterval = .milliseconds(10) }
        #expect(machine.setActive(true, now: .zero).first == .startPeriodic(every: .seconds(1)))
        #expect(machine.setActive(false, now: .zero) == [.stopPeriodic])
    }
}
