import Clocks
import ConcurrencyExtras
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

struct StepFailure: Error, CustomStringConvertible {
    var description: String { "cache server unreachable" }
}

@Suite("Startup pipeline", .timeLimit(.minutes(1)))
struct StartupPipelineTests {
    /// Every progress value the pipeline publishes until it finishes.
    static func follow(_ pipeline: StartupPipeline) async -> Task<[StartupProgress], Never> {
        let updates = await pipeline.progressUpdates()
        return Task {
            var values: [StartupProgress] = []
            for await progress in updates {
                values.append(progress)
                if progress.phase == .finished { break }
            }
            return values
        }
    }

    /// Waits until the pipeline's progress matches.
    static func progress(of pipeline: StartupPipeline, where matches: (StartupProgress) -> Bool) async -> StartupProgress? {
        for await progress in await pipeline.progressUpdates() where matches(progress) { return progress }
        return nil
    }

    @Test("steps run in order; progress moves by the steps' weights and the steps' own reports")
    func orderAndProgress() async throws {
        let order = LockIsolated<[String]>([])
        let pipeline = StartupPipeline(
            steps: [
                .blocking("auth") { _ in order.withValue { $0.append("auth") } },
                .optional("cache", weight: 2) { context in
                    order.withValue { $0.append("cache") }
                    await context.report("Downloading the cache", fraction: 0.5)
                },
                .optional("sync") { _ in order.withValue { $0.append("sync") } },
            ],
            clock: TestClock()
        )
        let follower = await Self.follow(pipeline)
        await pipeline.start()
        let result = await pipeline.completion()
        #expect(order.value == ["auth", "cache", "sync"])
        #expect(result.phase == .finished)
        #expect(result.fraction == 1)
        #expect(result.outcomes.map(\.step) == ["auth", "cache", "sync"])
        #expect(result.outcomes.allSatisfy { $0.outcome == .completed })
        let values = await follower.value
        #expect(values.map(\.fraction).reduce(into: []) { if $0.last != $1 { $0.append($1) } } == [0, 0.25, 0.5, 0.75, 1])
        #expect(values.contains { $0.message == "Downloading the cache" })
    }

    @Test("a failing optional step and a timed-out one are skipped with their reasons; the rest runs")
    func optionalFailuresAreSkipped() async throws {
        let clock = TestClock()
        let ran = LockIsolated(false)
        let pipeline = StartupPipeline(
            steps: [
                .optional("permission", timeout: .seconds(30)) { _ in
                    // A permission dialog nobody answers, and that ignores cancellation.
                    await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
                },
                .optional("cache") { _ in throw StepFailure() },
                .blocking("last") { _ in ran.setValue(true) },
            ],
            clock: clock
        )
        await pipeline.start()
        await clock.untilSomeoneSleeps()
        await clock.advance(by: .seconds(29))
        #expect(await pipeline.current.phase == .running(step: "permission"))
        await clock.advance(by: .seconds(1))
        let result = await pipeline.completion()
        #expect(result.phase == .finished)
        #expect(ran.value)
        #expect(result.outcomes[0].outcome == .skipped(StartupStepTimedOut(timeout: .seconds(30)).description))
        #expect(result.outcomes[1].outcome == .skipped("cache server unreachable"))
        #expect(result.outcomes[2].outcome == .completed)
    }

    @Test("a failing blocking step stops the pipeline; start() goes on from that step")
    func blockingFailureStops() async throws {
        let attempts = LockIsolated(0)
        let after = LockIsolated(0)
        let pipeline = StartupPipeline(
            steps: [
                .blocking("auth") { _ in
                    attempts.withValue { $0 += 1 }
                    if attempts.value == 1 { throw StepFailure() }
                },
                .optional("after") { _ in after.withValue { $0 += 1 } },
            ],
            clock: TestClock()
        )
        await pipeline.start()
        #expect(await pipeline.completion().phase == .failed(step: "auth", reason: "cache server unreachable"))
        #expect(after.value == 0)
        await pipeline.start()
        #expect(await pipeline.completion().phase == .finished)
        #expect(attempts.value == 2)
        #expect(after.value == 1)
    }

    @Test("start() while running does nothing; reset() mid-step cancels and returns to idle; start() runs from the top")
    func doubleStartAndReset() async throws {
        let clock = TestClock()
        let first = LockIsolated(0)
        let (cancellations, cancelled) = AsyncStream.makeStream(of: Void.self)
        let pipeline = StartupPipeline(
            steps: [
                .optional("first") { _ in first.withValue { $0 += 1 } },
                .optional("slow") { _ in
                    do { try await clock.sleep(for: .seconds(3600)) } catch {
                        cancelled.yield()
                        throw error
                    }
                },
            ],
            clock: clock
        )
        await pipeline.start()
        await pipeline.start()
        await clock.untilSomeoneSleeps()
        #expect(first.value == 1)
        #expect(await pipeline.current.phase == .running(step: "slow"))

        await pipeline.reset()
        #expect(await pipeline.current == StartupProgress())
        var cancelledSteps = cancellations.makeAsyncIterator()
        #expect(await cancelledSteps.next() != nil, "the slow step saw the cancellation")

        await pipeline.start()
        await clock.untilSomeoneSleeps()
        #expect(first.value == 2)
        await clock.advance(by: .seconds(3600))
        #expect(await pipeline.completion().phase == .finished)
    }

    @Test("a blocking sign-in step pauses until sign-in; the initial sync joins the launch run; after sign-out it runs again")
    func signInAndInitialSync() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                .init(
                    clientID: "web",
                    mutations: (1...30).map {
                        .upsert(id: Int64($0), entity: "events", entityID: "e-\($0)", data: .value(Int64($0)))
                    }
                ),
                token: token
            )
            let clock = TestClock()
            let session = SessionTests.session(server: server, directory: TestDirectory.make("session"), clock: clock)
            let pipeline = StartupPipeline(steps: [.signedIn(session), .initialSync(session, weight: 3)], clock: clock)

            await pipeline.start()
            #expect(await Self.progress(of: pipeline) { $0.message == "Waiting for sign-in" }?.phase == .running(step: "Signing in"))

            try await session.signIn("alice")
            let scheduler = try #require(await session.engine?.scheduler)
            _ = await Self.progress(of: pipeline) { $0.phase == .running(step: "Syncing") }
            await clock.advance(by: .milliseconds(251))
            let result = await pipeline.completion()
            #expect(result.phase == .finished)
            #expect(result.outcomes.map(\.outcome) == [.completed, .completed])
            let runs = await scheduler.history.filter { if case .startedRun = $0.1 { true } else { false } }
            #expect(runs.count == 1, "the initial sync is the launch run, not another")
            let local = try await session.engine!.store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events") }
            #expect(local == 30)

            try await session.signOut()
            await pipeline.reset()
            await pipeline.start()
            let restarted = await Self.progress(of: pipeline) { $0.message == "Waiting for sign-in" }
            #expect(restarted?.phase == .running(step: "Signing in"), "from the top after sign-out")
            try await session.signIn("alice")
            _ = await Self.progress(of: pipeline) { $0.phase == .running(step: "Syncing") }
            await clock.advance(by: .milliseconds(251))
            #expect(await pipeline.completion().phase == .finished)
            try await session.signOut()
        }
    }
}
