import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

/// `ferry client`, run as the built binary against a live server.
@Suite("ferry client", .timeLimit(.minutes(1)))
struct ClientCommandTests {
    static var binary: URL { FerryProcess.binary }

    static func ferry(_ arguments: [String]) async throws -> FerryProcess.Run {
        try await FerryProcess.run(arguments)
    }

    @Test("add, import, sync, status, list and journal; bad input is refused with a message and changes nothing")
    func endToEnd() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli")
            let store = scratch.appendingPathComponent("store").path
            let base = ["--store", store, "--user", "alice"]
            let token = try await TestServer.token(for: "alice")

            var run = try await Self.ferry(
                ["client", "add"] + base + ["--entity", "events", "--id", "e-1", "--data", #"{"value": 1}"#, "--natural-key", "k1"]
            )
            #expect(run.status == 0)
            run = try await Self.ferry(["client", "add"] + base + ["--entity", "events", "--id", "e-2", "--data", "[1]"])
            #expect(run.status != 0)
            #expect(run.error.contains("--data must be a JSON object"))

            let lines = scratch.appendingPathComponent("import.jsonl")
            try (#"{"entityID": "i-1", "data": {"v": 1}}"# + "\n" + #"{"entityID": "i-2", "data": 5}"# + "\n").write(
                to: lines,
                atomically: true,
                encoding: .utf8
            )
            run = try await Self.ferry(["client", "import"] + base + ["--entity", "events", "--file", lines.path])
            #expect(run.status != 0)
            #expect(run.error.contains(":2:"))
            try (#"{"entityID": "i-1", "data": {"v": 1}}"# + "\n" + #"{"entityID": "i-2", "data": {"v": 2}, "naturalKey": "k2"}"# + "\n").write(
                to: lines,
                atomically: true,
                encoding: .utf8
            )
            run = try await Self.ferry(["client", "import"] + base + ["--entity", "events", "--file", lines.path])
            #expect(run.status == 0)
            // Read a megabyte at a time: lines across chunk boundaries, the last one without a newline.
            let many = (0..<20_000).map { #"{"entityID": "m-\#($0)", "data": {"sample": "\#(String(repeating: "s", count: 40))"}}"# }
            try many.joined(separator: "\n").write(to: lines, atomically: true, encoding: .utf8)
            let bulk = ["--store", scratch.appendingPathComponent("bulk").path, "--user", "carol"]
            run = try await Self.ferry(["client", "import"] + bulk + ["--entity", "events", "--file", lines.path])
            #expect(run.status == 0 && run.output.contains("imported 20,000 records"), "\(run.output) \(run.error)")

            // What the protocol cannot carry is refused before anything is written.
            let huge = String(repeating: "x", count: 5 * 1024 * 1024)
            try (#"{"entityID": "i-3", "data": {"v": 3}}"# + "\n" + #"{"entityID": "big", "data": {"blob": "\#(huge)"}}"# + "\n").write(
                to: lines,
                atomically: true,
                encoding: .utf8
            )
            run = try await Self.ferry(["client", "import"] + base + ["--entity", "events", "--file", lines.path])
            #expect(run.status != 0)
            #expect(run.error.contains(":2:") && run.error.contains("262144"), "\(run.error)")
            run = try await Self.ferry(["client", "add"] + base + ["--entity", "events", "--id", "e-3", "--data", #"{"value": 1e999}"#])
            #expect(run.status != 0)
            #expect(run.error.contains("out of range"), "\(run.error)")
            run = try await Self.ferry(
                ["client", "add"] + base + ["--entity", "events", "--id", "e-3", "--data", #"{"value": 123456789012345678901234}"#]
            )
            #expect(run.status != 0)
            #expect(run.error.contains("does not fit in 64 bits"), "\(run.error)")

            run = try await Self.ferry(["client", "status"] + base + ["--json"])
            #expect(run.output.contains(#""pending":3"#))

            let bobToken = try await TestServer.token(for: "bob")
            run = try await Self.ferry(["client", "sync"] + base + ["--server", server.baseURL, "--token", bobToken])
            #expect(run.status != 0)
            #expect(run.error.contains("not 'alice'"))
            #expect(try await server.pullAll(token: token).isEmpty, "nothing was sent with another user's token")
            // The same name in another Unicode normalization is another user too.
            let decomposed = try await TestServer.token(for: "alice\u{301}")
            let composedBase = ["--store", base[1], "--user", "alic\u{E9}"]
            run = try await Self.ferry(["client", "sync"] + composedBase + ["--server", server.baseURL, "--token", decomposed])
            #expect(run.status != 0)
            #expect(run.error.contains("the token is for user"), "\(run.error)")

            run = try await Self.ferry(["client", "sync"] + base + ["--server", server.baseURL, "--token", token, "--json"])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.output.contains(#""pending":0"#))
            #expect(try await server.pullAll(token: token).count == 3)

            run = try await Self.ferry(["client", "list"] + base + ["--entity", "events", "--json"])
            let records = run.output.split(separator: "\n")
            #expect(records.count == 3)
            #expect(records.first?.contains(#""entityID":"e-1""#) == true)
            #expect(records.first?.contains(#""version":1"#) == true)

            run = try await Self.ferry(["client", "journal"] + base)
            #expect(run.output.contains("run.finished"))
        }
    }

    @Test("ferry client dead-letters lists what was set aside with why, --retry queues it again, --discard drops it")
    func deadLetters() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli-dead")
            let base = ["--store", scratch.appendingPathComponent("store").path, "--user", "alice"]
            let sync = ["client", "sync"] + base + ["--server", server.baseURL, "--token", try await TestServer.token(for: "alice")]
            // A record over the protocol's 256 KiB, which `ferry client` refuses to write: written
            // as an app would, straight into the store, where capture queues it.
            #expect(try await Self.ferry(["client", "add"] + base + ["--entity", "docs", "--id", "d-0", "--data", "{}"]).status == 0)
            let file = try StoreLocation.path(forUser: "alice", in: scratch.appendingPathComponent("store"))
            let database = try DatabaseQueue(path: file.path)
            try await database.write { db in
                try db.execute(sql: "INSERT INTO records (entity, id, data) VALUES ('docs', 'd-1', json_object('text', printf('%.*c', 300000, 'x')))")
            }
            try database.close()
            _ = try await Self.ferry(sync)
            var run = try await Self.ferry(["client", "dead-letters"] + base)
            #expect(run.status == 0)
            #expect(run.output.contains("upsert docs/d-1") && run.output.contains("256"), "\(run.output)")
            run = try await Self.ferry(["client", "dead-letters"] + base + ["--retry", "--discard"])
            #expect(run.status != 0)
            #expect(run.error.contains("exclude each other"))
            run = try await Self.ferry(["client", "dead-letters"] + base + ["--retry"])
            #expect(run.output.contains("queued 1 dead letters again"), "\(run.output)")
            _ = try await Self.ferry(sync)  // still too large: set aside again
            run = try await Self.ferry(["client", "dead-letters"] + base + ["--discard"])
            #expect(run.output.contains("discarded 1 dead letters"), "\(run.output)")
            run = try await Self.ferry(["client", "dead-letters"] + base + ["--json"])
            #expect(run.status == 0 && run.output.isEmpty)
        }
    }

    @Test("ferry client inspect: words for a stuck store, JSON with --json, and a missing store refused without making one")
    func inspect() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        let scratch = TestDirectory.make("cli-inspect")
        let store = scratch.appendingPathComponent("store").path
        let base = ["--store", store, "--user", "alice"]
        var run = try await Self.ferry(["client", "inspect"] + base)
        #expect(run.status != 0)
        #expect(run.error.contains("no store for user alice: --store \(store) does not exist"))
        #expect(!FileManager.default.fileExists(atPath: store), "inspect made nothing")

        for id in ["e-1", "e-2"] {
            run = try await Self.ferry(["client", "add"] + base + ["--entity", "events", "--id", id, "--data", #"{"v": 1}"#])
            #expect(run.status == 0)
        }
        run = try await Self.ferry(["client", "inspect"] + base)
        #expect(run.status == 0)
        let lines = run.output.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("Not yet acknowledged by the server: 2 changes (2 events); the oldest was made ") == true, "\(lines)")
        #expect(lines.contains("This store has never synced."))
        // Read, never changed: the file's bytes are the same after inspect.
        let file = URL(fileURLWithPath: store).appendingPathComponent(StoreLocation.fileName(forUser: "alice"))
        let before = try Data(contentsOf: file)
        _ = try await Self.ferry(["client", "inspect"] + base)
        #expect(try Data(contentsOf: file) == before, "inspect changed the store")
        // A file that is not a Ferry store (an empty one here) is refused, and stays empty.
        let other = scratch.appendingPathComponent("other")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        let empty = other.appendingPathComponent(StoreLocation.fileName(forUser: "bob"))
        #expect(FileManager.default.createFile(atPath: empty.path, contents: Data()))
        run = try await Self.ferry(["client", "inspect", "--store", other.path, "--user", "bob"])
        #expect(run.status != 0)
        #expect(run.error.contains("not a Ferry store"), "\(run.error)")
        #expect(try Data(contentsOf: empty).isEmpty)
        run = try await Self.ferry(["client", "inspect", "--store", file.path, "--user", "alice"])
        #expect(run.error.contains("is a file"))

        run = try await Self.ferry(["client", "inspect"] + base + ["--json"])
        let json = try JSONDecoder().decode(JSONValue.self, from: Data(run.output.utf8))
        guard case .object(let object) = json else {
            Issue.record("not a JSON object: \(run.output)")
            return
        }
        #expect(object["queued"] == .integer(2))
        #expect(object["queuedByEntity"] == .object(["events": .integer(2)]))
        #expect(object["lease"] == .null)
    }

    @Test("ferry client journal --html writes the timeline page without touching the store; bad paths and limits are refused")
    func journalPage() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli-journal-page")
            let store = scratch.appendingPathComponent("store").path
            let base = ["--store", store, "--user", "alice"]
            let page = scratch.appendingPathComponent("timeline.html").path
            var run = try await Self.ferry(["client", "journal"] + base + ["--html", page])
            #expect(run.status != 0)
            #expect(run.error.contains("no store for user alice"), "\(run.error)")

            run = try await Self.ferry(["client", "add"] + base + ["--entity", "events", "--id", "e-1", "--data", #"{"v": 1}"#])
            #expect(run.status == 0)
            let token = try await TestServer.token(for: "alice")
            run = try await Self.ferry(["client", "sync"] + base + ["--server", server.baseURL, "--token", token])
            #expect(run.status == 0, "\(run.error)")
            let file = URL(fileURLWithPath: store).appendingPathComponent(StoreLocation.fileName(forUser: "alice"))
            let before = try Data(contentsOf: file)

            run = try await Self.ferry(["client", "journal"] + base + ["--html", page])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.output.contains("wrote \(page)"))
            let html = try String(contentsOfFile: page, encoding: .utf8)
            #expect(html.hasPrefix("<!DOCTYPE html>"))
            #expect(html.contains("<p class=\"headline\">no triggers, one run</p>"), "a sync from the command line is a run no trigger asked for")
            #expect(html.contains("<rect class=\"run run-succeeded\""))
            #expect(html.contains("POST /v1/push → 200"))
            #expect(try Data(contentsOf: file) == before, "journal --html changed the store")

            for (arguments, message) in [
                (["--html", scratch.appendingPathComponent("missing/timeline.html").path], "does not exist"),
                (["--html", ""], "--html needs a file name"),
                (["--limit", "0"], "--limit must be 1 to 1000000"),
                (["--html", file.path], "is the store itself"),
                (["--html", file.path + "-wal"], "is the store itself"),
            ] {
                run = try await Self.ferry(["client", "journal"] + base + arguments)
                #expect(run.status != 0)
                #expect(run.error.contains(message), "\(arguments): \(run.error)")
            }
            #expect(!FileManager.default.fileExists(atPath: scratch.appendingPathComponent("missing").path))
            #expect(try Data(contentsOf: file) == before, "a page is never written over the store")
        }
    }

    @Test("two syncs and an import running at once on one store: after a last sync every record is on the server, once")
    func concurrentProcesses() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli-processes")
            let base = ["--store", scratch.appendingPathComponent("store").path, "--user", "alice"]
            let token = try await TestServer.token(for: "alice")
            func lines(_ range: Range<Int>) throws -> String {
                let file = scratch.appendingPathComponent("import-\(range.lowerBound).jsonl")
                try range.map { #"{"entityID": "r-\#($0)", "data": {"n": \#($0)}}"# }.joined(separator: "\n").write(
                    to: file,
                    atomically: true,
                    encoding: .utf8
                )
                return file.path
            }
            let first = try await Self.ferry(["client", "import"] + base + ["--entity", "records", "--file", try lines(0..<2000)])
            #expect(first.status == 0, "\(first.error)")
            let files = try stride(from: 2000, to: 6000, by: 400).map { try lines($0..<$0 + 400) }
            let sync = ["client", "sync"] + base + ["--server", server.baseURL, "--token", token, "--json"]
            async let one = Self.ferry(sync)
            async let two = Self.ferry(sync)
            async let edits: [FerryProcess.Run] = {
                var runs: [FerryProcess.Run] = []
                for file in files { runs.append(try await Self.ferry(["client", "import"] + base + ["--entity", "records", "--file", file])) }
                return runs
            }()
            let (syncs, imports) = try await ([one, two], edits)
            #expect(imports.allSatisfy { $0.status == 0 }, "\(imports.map(\.error))")
            #expect(syncs.allSatisfy { $0.status == 0 || $0.output.contains(#""error":null"#) }, "\(syncs.map(\.error))")
            let last = try await Self.ferry(sync)
            #expect(last.status == 0, "\(last.error)")
            #expect(last.output.contains(#""pending":0"#))
            let remote = try await server.pullAll(token: token)
            #expect(remote.count == 6000)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "a change was applied twice")
        }
    }

    @Test("ferry token refuses a missing or short secret with a message, and prints no token")
    func tokenFlags() async throws {
        for (arguments, message) in [
            (["token", "--user", "alice", "--secret", "hunter2"], "--secret: the JWT secret is 7 bytes; HS256 needs at least 32"),
            (["token", "--user", "alice", "--secret", ""], "no secret: pass --secret S or set FERRY_JWT_SECRET"),
            (["token", "--user", "", "--secret", TestServer.secret], "--user must not be empty"),
        ] {
            let run = try await Self.ferry(arguments)
            #expect(run.status == 64, "\(arguments)")
            #expect(run.error.contains(message) && run.output.isEmpty, "\(arguments): \(run.error)")
        }
        let good = try await Self.ferry(["token", "--user", "alice", "--secret", TestServer.secret])
        #expect(good.status == 0 && good.output.split(separator: ".").count == 3, "\(good.error)")
    }

    @Test("ferry serve refuses an idle timeout or port out of range with a message, before it creates a database")
    func serveFlags() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build the ferry executable first (swift build)")
        let database = TestDirectory.make("serve-flags").appendingPathComponent("server.sqlite").path
        for (flag, value, message) in [
            ("--idle-timeout", "0", "--idle-timeout must be from 1 to 3600 seconds, got 0"),
            ("--idle-timeout", "3601", "--idle-timeout must be from 1 to 3600 seconds, got 3601"),
            ("--port", "70000", "--port must be from 0 to 65535, got 70000"),
            ("--pool-size", "5", "--pool-size applies to a postgres:// database"),
        ] {
            let run = try await Self.ferry(["serve", "--database", "sqlite:\(database)", "--jwt-secret", TestServer.secret, flag, value])
            #expect(run.status != 0, "\(flag) \(value)")
            #expect(run.error.contains(message), "\(flag) \(value): \(run.error)")
        }
        let short = try await Self.ferry(["serve", "--database", "sqlite:\(database)", "--jwt-secret", "hunter2"])
        #expect(short.status == 64)
        #expect(short.error.contains("--jwt-secret / FERRY_JWT_SECRET: the JWT secret is 7 bytes; HS256 needs at least 32"), "\(short.error)")
        #expect(!FileManager.default.fileExists(atPath: database), "nothing was created")
        for (url, message) in [
            ("mysql://x@y/z", "is not a database URL Ferry knows"),
            ("postgres://ferry:hunter2@127.0.0.1:1/ferry?sslmode=maybe", "sslmode=maybe"),
            ("postgres://ferry:hunter2@127.0.0.1:1/ferry", "cannot use PostgreSQL at postgres://ferry@127.0.0.1:1/ferry"),
        ] {
            let run = try await Self.ferry(["serve", "--database", url, "--jwt-secret", TestServer.secret, "--port", "0"])
            #expect(run.status != 0, "\(url)")
            #expect(run.error.contains(message) && !run.error.contains("hunter2"), "\(url): \(run.error)")
        }
    }
}
