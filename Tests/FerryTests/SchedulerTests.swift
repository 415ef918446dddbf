import Clocks
import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

/// Holds runs open until the test lets them finish, and counts them.
actor RunGate {
    private(set) var kinds: [SyncKind] = []
    private var open = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run(_ kind: SyncKind) async {
        kinds.append(kind)
        if open { return }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Lets every held run finish; with `stayOpen`, later runs pass straight through.
    func release(stayOpen: Bool = false) {
        open = stayOpen
        for continuation in waiting { continuation.resume() }
        waiting.removeAll()
    }
}

// Tests advance the test clock 1 ms past a deadline, never exactly to it: under load a timer
// may register its sleep only after the advance, and TestClock parks a sleeper whose
// deadline equals `now` until a later advance that never comes.
@Suite("Scheduler", .timeLimit(.minutes(1)))
struct SchedulerTests {
    @Test("the launch storm: launch, the monitor's first report, became active and three flaps within 100 ms make one run that pulls 296 records")
    func launchStorm() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            var mutations: [Mutation] = []
            for index in 0..<296 {
                let entity = index < 100 ? "projects" : (index < 200 ? "tasks" : "calendar_events")
                mutations.append(.upsert(id: Int64(index + 1), entity: entity, entityID: "r-\(index)", data: .value(Int64(index))))
            }
            _ = try await server.pushOK(PushRequest(clientID: "web", mutations: mutations), token: token)

            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            let pulled = LockIsolated(0)
            let clock = TestClock()
            let scheduler = SyncScheduler(clock: clock) { kind in
                let report = try await client.sync(full: kind == .full)
                pulled.withValue { $0 += report.pull.received }
            }
            var events = EventReader(await scheduler.eventStream())

            await scheduler.trigger(.launch)
            await scheduler.connectivityChanged(online: true)  // the monitor's first report: a baseline
            await clock.advance(by: .milliseconds(10))
            await scheduler.trigger(.becameActive)
            for _ in 0..<3 {
                await clock.advance(by: .milliseconds(15))
                await scheduler.connectivityChanged(online: false)
                await clock.advance(by: .milliseconds(15))
                await scheduler.connectivityChanged(online: true)
            }
            await clock.advance(by: .milliseconds(251))
            let started = await events.runStarted()
            #expect(started?.0 == 1)
            #expect(started?.1 == .incremental)
            #expect(await events.runFinished() == 1)
            await clock.advance(by: .seconds(10))
            await Task.megaYield()

            let history = await scheduler.history
            #expect(history.filter { if case .startedRun = $0.1 { true } else { false } }.count == 1, "\(history)")
            let served = history.filter { if case .startedRun = $0.1 { true } else if case .coalescedIntoRun = $0.1 { true } else { false } }
            #expect(served.count == 5, "launch, became active and three restorations, all served by run 1: \(history)")
            #expect(pulled.value == 296)
        }
    }

    @Test("ten triggers during a run make exactly one follow-up run, full if any of them asked for full")
    func followUp() async throws {
        let clock = TestClock()
        let gate = RunGate()
        let scheduler = SyncScheduler(clock: clock) { kind in await gate.run(kind) }
        var events = EventReader(await scheduler.eventStream())
        await scheduler.trigger(.manual)
        #expect(await events.runStarted()?.0 == 1)
        for index in 0..<10 {
            await scheduler.trigger(index == 4 ? .remoteNotification : .localChange, kind: index == 4 ? .full : nil)
        }
        await gate.release(stayOpen: true)
        #expect(await events.runFinished() == 1)
        await clock.advance(by: .milliseconds(2001))  // the minimum interval
        let second = await events.runStarted()
        #expect(second?.0 == 2)
        #expect(second?.1 == .full)
        #expect(await events.runFinished() == 2)
        await clock.advance(by: .seconds(30))
        await Task.megaYield()
        #expect(await gate.kinds == [.incremental, .full])
        let queued = await scheduler.history.filter { $0.1 == .queuedAfterRun(1) }
        #expect(queued.count == 10)
    }

    @Test("an automatic trigger inside the minimum interval runs once the interval has passed; a manual one runs at once")
    func minimumInterval() async throws {
        let clock = TestClock()
        let gate = RunGate()
        await gate.release(stayOpen: true)
        let scheduler = SyncScheduler(clock: clock) { kind in await gate.run(kind) }
        var events = EventReader(await scheduler.eventStream())
        await scheduler.trigger(.manual)
        #expect(await events.runFinished() == 1)
        await scheduler.trigger(.manual)  // a person asked right after a write: no wait
        #expect(await events.runFinished() == 2)
        await clock.advance(by: .milliseconds(500))
        await scheduler.trigger(.localChange)
        await clock.advance(by: .milliseconds(1400))
        await Task.megaYield()
        #expect(await gate.kinds.count == 2, "still inside the 2 s interval")
        await clock.advance(by: .milliseconds(101))
        #expect(await events.runStarted()?.0 == 3)
    }

    @Test("offline, nothing runs; when the link returns, one run")
    func offlineThenOnline() async throws {
        let clock = TestClock()
        let gate = RunGate()
        await gate.release(stayOpen: true)
        let scheduler = SyncScheduler(clock: clock) { kind in await gate.run(kind) }
        var events = EventReader(await scheduler.eventStream())
        await scheduler.connectivityChanged(online: false)
        await scheduler.trigger(.launch)
        await scheduler.trigger(.localChange)
        await clock.advance(by: .seconds(60))
        await Task.megaYield()
        #expect(await gate.kinds.isEmpty)
        #expect(await scheduler.history.map(\.1) == [.waitingForNetwork, .waitingForNetwork])
        await scheduler.connectivityChanged(online: true)
        await clock.advance(by: .milliseconds(251))
        #expect(await events.runStarted()?.0 == 1)
        #expect(await events.runFinished() == 1)
        await clock.advance(by: .seconds(60))
        await Task.megaYield()
        #expect(await gate.kinds == [.incremental])
    }

    @Test("the trigger history keeps the newest fates, up to its capacity")
    func boundedHistory() async throws {
        var configuration = SchedulerConfiguration()
        configuration.historyCapacity = 5
        let clock = TestClock()
        let scheduler = SyncScheduler(clock: clock, configuration: configuration) { _ in }
        await scheduler.trigger(.launch)
        for _ in 0..<30 { await scheduler.trigger(.localChange) }
        await scheduler.trigger(.manual)
        let history = await scheduler.history
        #expect(history.count == 5)
        #expect(history.last?.0 == .manual)
        #expect(!history.contains { $0.0 == .launch })
        await scheduler.stop()
    }
}
