import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

/// `ferry space`, `ferry token --admin` and `ferry client … --space`, run as the built binary against a live server.
@Suite("ferry space", .timeLimit(.minutes(1)))
struct SpaceCommandTests {
    static func ferry(_ arguments: [String]) async throws -> FerryProcess.Run {
        try await FerryProcess.run(arguments)
    }

    @Test("create, grant, members, list, revoke and delete; every refusal is a message and exit 1; an invalid id is refused before any request")
    func management() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let alice = ["--server", server.baseURL, "--token", try await TestServer.token(for: "alice")]
            let bob = ["--server", server.baseURL, "--token", try await TestServer.token(for: "bob")]
            var run = try await Self.ferry(["space", "create", "team-1"] + alice)
            #expect(run.status == 0 && run.output.contains("team-1: admin"), "\(run.error)")
            run = try await Self.ferry(["space", "grant", "team-1", "--user", "bob", "--role", "write"] + alice)
            #expect(run.status == 0 && run.output.contains("bob is write"), "\(run.error)")
            run = try await Self.ferry(["space", "members", "team-1"] + bob)
            #expect(run.output == "alice\tadmin\nbob\twrite\n", "\(run.output)")
            run = try await Self.ferry(["space", "list", "--json"] + bob)
            #expect(
                try JSONDecoder().decode(SpaceList.self, from: Data(run.output.utf8)).spaces.withoutIncarnations == [
                    Membership(space: "team-1", role: .write)
                ]
            )
            // Refusals: the server's code and message, exit 1.
            run = try await Self.ferry(["space", "delete", "team-1"] + bob)
            #expect(run.status == 1 && run.error.contains("403 forbidden") && run.error.contains("admin"), "\(run.error)")
            run = try await Self.ferry(["space", "create", "team-1"] + bob)
            #expect(run.status == 1 && run.error.contains("space_exists"), "\(run.error)")
            run = try await Self.ferry(["space", "revoke", "team-1", "--user", "alice"] + alice)
            #expect(run.status == 1 && run.error.contains("last_admin"), "\(run.error)")
            run = try await Self.ferry(["space", "members", "nowhere"] + alice)
            #expect(run.status == 1 && run.error.contains("not_found"), "\(run.error)")
            // Bad input, before any request: exit 64 with the rule.
            for arguments in [
                ["space", "create", "Team"] + alice, ["space", "grant", "team-1", "--user", "bob", "--role", "owner"] + alice,
                ["space", "create", "team-2", "--server", "ftp://x", "--token", "t"], ["space", "list", "--server", server.baseURL],
            ] {
                run = try await Self.ferry(arguments)
                #expect(run.status == 64, "\(arguments): \(run.status) \(run.error)")
            }
            run = try await Self.ferry(["space", "revoke", "team-1", "--user", "bob"] + bob)
            #expect(run.status == 0, "a member leaves by themself: \(run.error)")
            run = try await Self.ferry(["space", "delete", "team-1"] + alice)
            #expect(run.status == 0 && run.output.contains("deleted space team-1"))
        }
    }

    @Test(
        "ferry token --admin makes a service token; client add, import, delete and list --space on the generic store; a read-only space refuses a write"
    )
    func clientInSpaces() async throws {
        try await TestServer.run { server in
            let service = try await Self.ferry(["token", "--user", "backend", "--admin", "--secret", TestServer.secret]).output
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let admin = ["--server", server.baseURL, "--token", service]
            #expect(try await Self.ferry(["space", "create", "company"] + admin).status == 0)
            #expect(try await Self.ferry(["space", "create", "team"] + admin).status == 0)
            #expect(try await Self.ferry(["space", "grant", "company", "--user", "alice", "--role", "read"] + admin).status == 0)
            #expect(try await Self.ferry(["space", "grant", "team", "--user", "alice", "--role", "write"] + admin).status == 0)
            let store = ["--store", TestDirectory.make("cli-spaces").appendingPathComponent("store").path, "--user", "alice"]
            let sync = ["client", "sync"] + store + ["--server", server.baseURL, "--token", try await TestServer.token(for: "alice")]
            var run = try await Self.ferry(
                ["client", "add"] + store + ["--entity", "tasks", "--id", "t1", "--data", #"{"v":1}"#, "--space", "team"]
            )
            #expect(run.status == 0 && run.output.contains("in space team"))
            run = try await Self.ferry(["client", "add"] + store + ["--entity", "tasks", "--id", "mine", "--data", #"{"v":2}"#])
            let lines = TestDirectory.make("cli-spaces-import").appendingPathComponent("t.jsonl")
            try #"{"entityID": "t2", "data": {"v": 3}}"#.write(to: lines, atomically: true, encoding: .utf8)
            run = try await Self.ferry(["client", "import"] + store + ["--entity", "tasks", "--file", lines.path, "--space", "team"])
            #expect(run.status == 0)
            run = try await Self.ferry(sync)
            #expect(run.status == 0, "\(run.error)")
            run = try await Self.ferry(["client", "list"] + store + ["--entity", "tasks", "--json"])
            let listed = run.output.split(separator: "\n").map { String($0) }
            #expect(listed.count == 3)
            #expect(listed.filter { $0.contains(#""space":"team""#) }.count == 2)
            #expect(listed.contains { $0.contains(#""entityID":"mine""#) && !$0.contains("space") }, "a personal record has no space")
            run = try await Self.ferry(["client", "list"] + store + ["--entity", "tasks", "--space", "team"])
            #expect(run.output.split(separator: "\n").count == 2)
            // The server has them in the space, for every member.
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records["team:tasks/t1"] != nil && records["team:tasks/t2"] != nil && records["tasks/mine"] != nil)
            // Read-only: refused in the store, nothing queued.
            run = try await Self.ferry(["client", "add"] + store + ["--entity", "aliases", "--id", "a", "--data", "{}", "--space", "company"])
            #expect(run.status == 1 && run.error.contains("space 'company' is read-only") && run.error.contains("role read"), "\(run.error)")
            run = try await Self.ferry(["client", "delete"] + store + ["--entity", "tasks", "--id", "t1"])
            #expect(run.status == 1 && run.error.contains("personal space"), "t1 is in team, not personal: \(run.error)")
            run = try await Self.ferry(["client", "delete"] + store + ["--entity", "tasks", "--id", "t1", "--space", "team"])
            #expect(run.status == 0)
            run = try await Self.ferry(["client", "add"] + store + ["--entity", "tasks", "--id", "x", "--data", "{}", "--space", "Bad Id"])
            #expect(run.status == 1 && run.error.contains("--space"))
            #expect(try await Self.ferry(sync).status == 0)
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice"))["team:tasks/t1"] == nil)
        }
    }
}
