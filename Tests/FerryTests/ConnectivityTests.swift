import Clocks
import Ferry
import FerryTestSupport
import Foundation
import Testing

@Suite("Connectivity", .timeLimit(.minutes(1)))
struct ConnectivityTests {
    @Test("the health probe reports the server reachable first, then unreachable once it is gone")
    func healthProbe() async throws {
        let clock = TestClock()
        let states = try await TestServer.run { server in
            let monitor = HealthProbeMonitor(
                transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                clock: clock,
                interval: .seconds(30)
            )
            let states = monitor.states()
            var iterator = states.makeAsyncIterator()
            #expect(await iterator.next() == true)
            return states
        }
        await clock.untilSomeoneSleeps()
        await clock.advance(by: .seconds(30))
        var iterator = states.makeAsyncIterator()
        #expect(await iterator.next() == false)
    }

    @Test("a session feeds its monitor to the scheduler: the first report is a baseline, a return from offline triggers")
    func sessionFollowsConnectivity() async throws {
        try await TestServer.run { server in
            let clock = TestClock()
            let (session, link) = SessionTests.scriptedSession(server: server, clock: clock)
            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            var events = EventReader(await scheduler.eventStream())
            link.yield(false)  // the baseline: offline
            #expect(await events.next { $0 == .trigger(.connectivityRestored, .ignored(.baseline(online: false))) } != nil)
            await clock.advance(by: .seconds(10))
            #expect(await scheduler.history.map(\.1) == [.waitingForNetwork])
            link.yield(true)
            await clock.untilSomeoneSleeps()  // the link settles for a window before the run
            await clock.advance(by: .milliseconds(251))
            #expect(await events.runFinished() == 1)
            #expect(await scheduler.history.map(\.1) == [.waitingForNetwork, .startedRun(1), .coalescedIntoRun(1)])
            try await session.signOut()
        }
    }
}
