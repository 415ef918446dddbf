import Ferry
import FerryProtocol
import FerryTesting
import Foundation

/// docs/DESIGN.md failure 4: the engine follows the signed-in user. A's pending changes wait
/// through B's session, are never sent with B's token, and go out when A returns.
struct AccountSwitchScenario: DemoScenario {
    let name = "account-switch"
    let title = "Sign-out and switch: Ana leaves pending changes, Ben signs in on the same device, Ana returns"

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        let link = DemoLink(online: false)
        let app = DemoApp(directory: directory.appendingPathComponent("tablet"), server: server, connectivity: link)
        let (users, signedInUser) = AsyncStream.makeStream(of: String?.self)
        let following = Task { try await app.session.follow(users) }
        defer { following.cancel() }

        /// Waits until the session has followed the app's user to `user`.
        func settle(on user: String?) async {
            for await engine in await app.session.engineUpdates() where engine?.userID == user { return }
        }

        signedInUser.yield("ana")
        await settle(on: "ana")
        try await app.recordHealthEvents(25, prefix: "ana") { "hk:ana:\($0)" }
        let anaQueued = try await app.pendingInStore()
        output.say("Ana records 25 events on a train with no network: \(anaQueued) pending. She signs out (pending changes kept).")
        signedInUser.yield(nil)
        await settle(on: nil)

        link.set(online: true)
        signedInUser.yield("ben")
        await settle(on: "ben")
        let benOrigin = Date()
        try await app.recordHealthEvents(10, prefix: "ben") { "hk:ben:\($0)" }
        var engine = try await app.engine()
        try await engine.scheduler.run(for: .manual)
        let benJournal = try await app.journal(since: benOrigin)
        let benRemote = try await server.records(of: "ben")
        let anaWhileBen = try await server.records(of: "ana")
        output.say("Ben signs in and syncs: the server holds \(benRemote.count) records for Ben and \(anaWhileBen.count) for Ana.")
        DemoTimeline.narrate(benJournal, since: benOrigin, to: output, limit: 8)

        signedInUser.yield("ana")
        await settle(on: "ana")
        let anaOrigin = Date()
        engine = try await app.engine()
        try await engine.scheduler.initialSync()
        let anaStatus = await engine.client.status
        let anaJournal = try await app.journal(since: anaOrigin)
        signedInUser.yield(nil)
        await settle(on: nil)
        output.say("Ana signs in again:")
        DemoTimeline.narrate(anaJournal, since: anaOrigin, to: output, limit: 8)

        let anaRemote = try await server.records(of: "ana")
        let benHoldsAna = benRemote.keys.filter { $0.contains("ana-") }.count
        return ScenarioOutcome(
            metrics: [
                "anaQueued": anaQueued, "benRecords": benRemote.count, "anaRecordsWhileBen": anaWhileBen.count,
                "anaRecords": anaRemote.count, "pending": anaStatus.pending, "pushRequests": app.wire.count(Endpoint.push),
            ],
            checks: [
                (
                    "Ben's sync sent only Ben's 10 changes, with Ben's token (\(benHoldsAna) of Ana's under Ben)",
                    benRemote.count == 10 && benHoldsAna == 0
                ),
                (
                    "Ana's 25 waited untouched while Ben was signed in (\(anaWhileBen.count) on the server then)",
                    anaWhileBen.isEmpty && anaQueued == 25
                ),
                ("Ana's 25 were sent when she returned; \(anaStatus.pending) left pending", anaRemote.count == 25 && anaStatus.pending == 0),
            ],
            timelines: [.init(title: "ben", events: benJournal), .init(title: "ana, back", events: anaJournal)]
        )
    }
}
