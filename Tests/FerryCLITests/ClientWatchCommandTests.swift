import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

/// `ferry client watch`, run as the built binary against a live server.
@Suite("ferry client watch", .timeLimit(.minutes(1)))
struct ClientWatchCommandTests {
    /// Waits (real time: two processes and a server) until `condition` holds.
    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<1_000 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TestFailure("never: \(what)")
    }

    @Test("pulls another device's change as it happens, pushes what a second process writes to the store, one line a run, exit 0 on SIGTERM")
    func endToEnd() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli-watch")
            let store = scratch.appendingPathComponent("store").path
            let base = ["--store", store, "--user", "alice"]
            let token = try await TestServer.token(for: "alice")
            let watch = try FerryProcess(["client", "watch"] + base + ["--server", server.baseURL, "--token", token], in: scratch)
            defer { watch.process.terminate() }
            try await Self.eventually("the launch run") { watch.text.contains("run 1 (launch) synced") }

            // Another device writes: the watcher pulls it without being asked.
            let mutation = Mutation(id: 1, entity: "events", entityID: "from-phone", op: .upsert, data: .value(1))
            _ = try await server.pushOK(PushRequest(clientID: "phone", mutations: [mutation]), token: token)
            // (A run for the stream's opening may come first, with nothing to pull: the line that counts holds the record.)
            try await Self.eventually("the phone's change pulled") {
                watch.text.split(separator: "\n").contains { $0.contains("(serverChange") && $0.contains(": 1 records") }
            }
            let listed = try await FerryProcess.run(["client", "list"] + base + ["--entity", "events"])
            #expect(listed.output.contains("from-phone"), "\(listed.output) \(listed.error)")

            // A second process writes to the watched store: the watcher notices and pushes it.
            let added = try await FerryProcess.run(
                ["client", "add"] + base + ["--entity", "events", "--id", "from-cli", "--data", #"{"value": 2}"#]
            )
            #expect(added.status == 0, "\(added.error)")
            try await Self.eventually("the second process's write on the server") { try await server.pullAll(token: token)["events/from-cli"] != nil }

            kill(watch.process.processIdentifier, SIGTERM)
            try await Self.eventually("the watcher ended") { !watch.process.isRunning }
            #expect(watch.process.terminationStatus == 0, "\(watch.text)")
            #expect(watch.text.contains("stopping after the run in progress"))
            #expect(
                watch.text.components(separatedBy: "\n").filter { $0.hasPrefix("run ") }.allSatisfy { $0.contains(" synced in ") },
                "\(watch.text)"
            )
        }
    }

    @Test("bad flags are refused before anything is sent")
    func badInput() async throws {
        let scratch = TestDirectory.make("cli-watch-bad")
        let base = ["client", "watch", "--store", scratch.appendingPathComponent("store").path, "--user", "alice"]
        let token = try await TestServer.token(for: "alice")
        var run = try await FerryProcess.run(base + ["--server", "ftp://x", "--token", token])
        #expect(run.status == 64 && run.error.contains("--server 'ftp://x' is not an http(s) URL"), "\(run.error)")
        run = try await FerryProcess.run(base + ["--server", "http://127.0.0.1:1", "--token", "nonsense"])
        #expect(run.status == 64 && run.error.contains("--token is not a JWT"), "\(run.error)")
        run = try await FerryProcess.run(base + ["--server", "http://127.0.0.1:1", "--token", try await TestServer.token(for: "bob")])
        #expect(run.status == 64 && run.error.contains("the token is for user 'bob'"), "\(run.error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.appendingPathComponent("store").path))
    }
}
