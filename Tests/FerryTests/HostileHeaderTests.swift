import FerryTestSupport
import FerryTesting
import Foundation
import Testing

@testable import Ferry

@Suite("Hostile headers", .timeLimit(.minutes(1)))
struct HostileHeaderTests {
    static let huge = "\(Int.max)"

    @Test(
        "a Retry-After or a rate-limit reset no clock can hold is waited for an hour at most, and nothing traps",
        arguments: [
            (Int?(429), ["retry-after": huge], 3600.0),
            (503, ["retry-after": "99999999999999999999"], 1),  // past Int64: unreadable, so the 1 s default
            (nil, ["ratelimit-remaining": "0", "ratelimit-reset": huge, "ratelimit-limit": "1"], 3600),
        ] as [(Int?, [String: String], Double)]
    )
    func absurdWaitsAreCapped(status: Int?, headers: [String: String], expectedWait: Double) async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('e-1', 1)") }
            let transport = InterceptingTransport.rewritingHeaders(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                path: "/v1/push",
                status: status,
                headers: headers
            )
            let clock = VirtualClock()
            let client = ClientFixture.client(store: store, server: server, transport: transport, clock: clock)
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 1)
            let waits = try await client.journal.events().filter { $0.kind == .wait }.compactMap { $0.details["seconds"].flatMap(Double.init) }
            #expect(waits.max() == expectedWait)
            #expect(clock.now.offset <= .seconds(3600 + 60), "the sync waited \(clock.now.offset)")
        }
    }

    @Test("a status with values out of any range still reads as text")
    func progressTextNeverTraps() {
        for phase in [
            SyncStatus.Phase.waiting(seconds: .infinity, reason: "r"), .waiting(seconds: .nan, reason: "r"),
            .waiting(seconds: -5, reason: "r"), .uploading(done: .max, total: 1), .uploading(done: 5, total: 0),
            .uploading(done: .min, total: .max),
        ] {
            var status = SyncStatus(phase: phase)
            status.pending = .min
            _ = status.progressText
        }
        #expect(SyncStatus(phase: .waiting(seconds: .infinity, reason: "rate limited")).progressText == "Waiting a long time: rate limited")
        #expect(SyncStatus(phase: .uploading(done: 2500, total: 5000)).progressText == "Synced 2,500 of 5,000 (50%)")
    }

    @Test("backoff delays stay within a day whatever the policy says")
    func backoffNeverOverflows() {
        var generator = JitterGenerator(seed: 7)
        let policy = RetryPolicy(initialDelay: .seconds(Int64.max / 2), maximumDelay: .seconds(Int64.max), maximumAttempts: 3)
        for attempt in 1...40 { #expect(policy.delay(forAttempt: attempt, using: &generator) <= .seconds(86_400)) }
    }
}
