import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Logging
import PostgresNIO
import Testing

/// Several `ferry serve` processes on one database, as behind a load balancer: each request
/// goes to whichever process, retries land on another, and the same retried batch reaches
/// two processes at once.
@Suite("Several server processes on one database", .timeLimit(.minutes(5)))
struct MultiProcessTests {
    /// `count` `ferry serve` processes on `database`, all started at once (so on a fresh
    /// PostgreSQL database they race to migrate it), and their addresses.
    static func serve(
        _ count: Int,
        on database: TestDatabase,
        rateLimit: String = "off",
        options: [String] = [],
        in directory: URL
    ) async throws
        -> ([FerryProcess], [RemoteServer])
    {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        var arguments = [
            "serve", "--database", database.url.description, "--port", "0", "--jwt-secret", TestServer.secret, "--rate-limit", rateLimit,
        ]
        if database.backend == .postgres { arguments += ["--pool-size", "4"] }
        // These tests send many requests of one user at once: no cap on them unless a test sets one.
        if !options.contains("--max-requests-per-user") { arguments += ["--max-requests-per-user", "1000"] }
        arguments += options
        let processes = try (0..<count).map { _ in try FerryProcess(arguments, in: directory) }
        var servers: [RemoteServer] = []
        for process in processes {
            do {
                servers.append(RemoteServer(baseURL: "http://127.0.0.1:\(try await process.listeningPort())"))
            } catch {
                for started in processes { started.process.terminate() }
                throw error
            }
        }
        return (processes, servers)
    }

    @Test(
        "live changes across processes: a commit or grant on one wakes a stream on the other; a lost LISTEN connection reconnects and tells every stream",
        arguments: StorageBackend.allCases
    )
    func liveAcrossProcesses(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("multi-process-live")
        let database = try await TestDatabase.make(backend)
        let (processes, servers) = try await Self.serve(2, on: database, in: directory)
        defer { for process in processes { process.process.terminate() } }
        let alice = try await TestServer.token(for: "alice")
        let stream = try await EventStreamProbe.open(servers[0].baseURL, token: alice, client: "phone")
        #expect(try await stream.next() == .event("ready"))
        // On SQLite a process learns of another's commits from the file, every half second, as
        // one wake for all of them: after each step, the events it caused are taken together.
        func heard() async throws -> Bool {
            let first = try await stream.next()
            if database.backend == .sqlite {
                try await Task.sleep(for: .milliseconds(700))
                _ = await stream.drain()
            }
            return first == .event("change")
        }

        _ = try await servers[1].pushOK(
            PushRequest(clientID: "laptop", mutations: [.upsert(id: 1, entity: "notes", entityID: "n1", data: .value(1))]),
            token: alice
        )
        #expect(try await heard())
        try await servers[1].makeSpace("team", admin: "bob", members: ["alice": .read])
        #expect(try await heard())
        let bob = try await TestServer.token(for: "bob")
        _ = try await servers[1].pushOK(
            PushRequest(
                clientID: "bob-phone",
                mutations: [Mutation(id: 1, entity: "notes", entityID: "t1", op: .upsert, data: .value(1), space: "team")]
            ),
            token: bob
        )
        #expect(try await heard())

        // Every process's listening connection dies: whatever committed meanwhile is unknown,
        // so each process, once listening again, tells every stream to pull. Nothing is pushed.
        guard case .postgres(let location) = database.url else {
            await stream.close()
            return
        }
        let ended = try await TestPostgres.withConnection(to: location) { connection in
            var count = 0
            for try await _ in try await connection.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = \(PostgresSyncStorage.listenerName) AND datname = current_database()",
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            ) { count += 1 }
            return count
        }
        #expect(ended == 2)
        #expect(try await stream.next() == .event("change"))
        // And it listens again: the next commit through the other process still arrives.
        _ = try await servers[1].pushOK(
            PushRequest(clientID: "laptop", mutations: [.upsert(id: 2, entity: "notes", entityID: "n2", data: .value(2))]),
            token: alice
        )
        #expect(try await stream.next() == .event("change"))
        await stream.close()
    }

    /// Writers still writing.
    actor WritersLeft {
        private(set) var count: Int
        init(count: Int) { self.count = count }
        func finish() { count -= 1 }
    }

    /// What one client of a user writes: records it updates again and again (counters),
    /// records it creates once, and records holding natural keys every client of the user
    /// also claims.
    struct Writer: Sendable {
        let user: String
        let clientID: String
        var nextID: Int64 = 1
        var counts: [String: Int64] = [:]
        var created: [String] = []

        mutating func batch(size: Int, using random: inout SeededGenerator) -> [Mutation] {
            (0..<size).map { _ in
                defer { nextID += 1 }
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<4:
                    let id = "\(clientID)-counter-\(Int.random(in: 0..<8, using: &random))"
                    counts[id, default: 0] += 1
                    return .upsert(id: nextID, entity: "notes", entityID: id, data: .value(counts[id]!))
                case 4..<9:
                    let id = "\(clientID)-once-\(nextID)"
                    created.append(id)
                    return .upsert(id: nextID, entity: "notes", entityID: id, data: .value(0))
                default:
                    let key = "shared-\(Int.random(in: 0..<5, using: &random))"
                    return .upsert(id: nextID, entity: "samples", entityID: "\(clientID)-\(key)", data: .value(1), naturalKey: key)
                }
            }
        }
    }

    @Test(
        "clients push and pull through two processes at random, answers are lost and retried on the other process, and the same batch reaches both at once: every change applied exactly once, no puller skips one, natural keys unique",
        arguments: StorageBackend.allCases
    )
    func exactlyOnceAcrossProcesses(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("multi-process")
        let database = try await TestDatabase.make(backend)
        let (processes, servers) = try await Self.serve(2, on: database, in: directory)
        defer { for process in processes { process.process.terminate() } }

        let users = ["alice", "bob"]
        let clientsPerUser = 3
        let batches = 25
        let batchSize = 40
        var tokens: [String: String] = [:]
        for user in users { tokens[user] = try await TestServer.token(for: user) }
        let tokensByUser = tokens

        enum Outcome: Sendable {
            case writer(Writer)
            case puller(user: String, seen: [String: Change])
        }
        let writing = WritersLeft(count: users.count * clientsPerUser)
        let outcomes = try await withThrowingTaskGroup(of: Outcome.self) { group in
            for user in users {
                for index in 0..<clientsPerUser {
                    group.addTask {
                        var writer = Writer(user: user, clientID: "\(user)-device-\(index)")
                        var random = SeededGenerator(seed: UInt64(index * 31 + user.count))
                        for _ in 0..<batches {
                            let request = PushRequest(clientID: writer.clientID, mutations: writer.batch(size: batchSize, using: &random))
                            let token = tokensByUser[user]!
                            let first = servers.randomElement(using: &random)!
                            let other = servers.first { $0.baseURL != first.baseURL }!
                            switch Int.random(in: 0..<3, using: &random) {
                            case 0:
                                _ = try await first.pushOK(request, token: token)
                            case 1:
                                // The answer is lost; the client's retry lands on the other process.
                                let lost = try await first.pushOK(request, token: token)
                                let retried = try await other.pushOK(request, token: token)
                                try Self.expectSameResults(lost, retried)
                            default:
                                // A retry sent while the first attempt is still being served.
                                async let a = first.pushOK(request, token: token)
                                async let b = other.pushOK(request, token: token)
                                try Self.expectSameResults(try await a, try await b)
                            }
                        }
                        await writing.finish()
                        return .writer(writer)
                    }
                }
            }
            for user in users {
                // A device that only pulls, through either process, the whole time.
                group.addTask {
                    let token = tokensByUser[user]!
                    var random = SeededGenerator(seed: UInt64(user.count))
                    var seen: [String: Change] = [:]
                    var cursor: String?
                    for _ in 0..<200 {
                        let page = try await servers.randomElement(using: &random)!.pullOK(token: token, cursor: cursor, limit: 150)
                        for change in page.changes { seen["\(change.entity)/\(change.entityID)"] = change }
                        cursor = page.cursor
                    }
                    // Once every writer is done (the 200 pulls may end first on a fast machine),
                    // catch up, then compare with a pull from the beginning.
                    while await writing.count > 0 { try await Task.sleep(for: .milliseconds(20)) }
                    var caughtUp = false
                    while !caughtUp {
                        let page = try await servers.randomElement(using: &random)!.pullOK(token: token, cursor: cursor, limit: 500)
                        for change in page.changes { seen["\(change.entity)/\(change.entityID)"] = change }
                        cursor = page.cursor
                        caughtUp = !page.hasMore
                    }
                    return .puller(user: user, seen: seen)
                }
            }
            return try await group.reduce(into: [Outcome]()) { $0.append($1) }
        }

        for user in users {
            let token = tokensByUser[user]!
            let truth = try await servers[0].pullAll(token: token)
            #expect(try await servers[1].pullAll(token: token) == truth)
            for case .puller(user, let seen) in outcomes {
                // A pull from the beginning brings no tombstones; the puller holds those it saw.
                let live = seen.filter { $0.value.op == .upsert }
                let differing = Set(live.keys).union(truth.keys).filter { live[$0] != truth[$0] }.sorted()
                #expect(
                    differing.isEmpty,
                    "the puller's view differs from a pull from the beginning in \(differing.count) records: \(differing.prefix(5).map { "\($0): \(String(describing: live[$0])) vs \(String(describing: truth[$0]))" })"
                )
            }
            for case .writer(let writer) in outcomes where writer.user == user {
                for (id, count) in writer.counts {
                    // Written `count` times, each applied once: version `count`, holding the last value.
                    #expect(truth["notes/\(id)"]?.version == count, "\(id)")
                    #expect(truth["notes/\(id)"]?.data == .value(count), "\(id)")
                }
                for id in writer.created { #expect(truth["notes/\(id)"]?.version == 1, "\(id)") }
            }
            let holders = Dictionary(grouping: truth.values.filter { $0.entity == "samples" && $0.op == .upsert }, by: \.naturalKey)
            #expect(holders.count == 5)
            #expect(holders.values.allSatisfy { $0.count == 1 }, "\(holders)")
            #expect(!truth.keys.contains { $0.contains(user == "alice" ? "bob-" : "alice-") })
        }
    }

    /// A puller that kept pulling while the writers wrote must end where a pull from the
    /// beginning ends: checked separately because a skipped create-only record never comes back.
    @Test("a device pulling through both processes while others push ends with every record a fresh pull returns", arguments: StorageBackend.allCases)
    func pullerMissesNothing(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("multi-process-pull")
        let database = try await TestDatabase.make(backend)
        let (processes, servers) = try await Self.serve(2, on: database, in: directory)
        defer { for process in processes { process.process.terminate() } }
        let token = try await TestServer.token(for: "alice")

        let seen = try await withThrowingTaskGroup(of: [String: Int64]?.self) { group in
            for writer in 0..<6 {
                group.addTask {
                    for batch in 0..<30 {
                        let mutations = (0..<25).map { index in
                            Mutation.upsert(
                                id: Int64(batch * 25 + index + 1),
                                entity: "notes",
                                entityID: "w\(writer)-\(batch)-\(index)",
                                data: .value(1)
                            )
                        }
                        _ = try await servers[(writer + batch) % 2].pushOK(
                            PushRequest(clientID: "writer-\(writer)", mutations: mutations),
                            token: token
                        )
                    }
                    return nil
                }
            }
            group.addTask {
                var seen: [String: Int64] = [:]
                var cursor: String?
                for round in 0..<400 {
                    let page = try await servers[round % 2].pullOK(token: token, cursor: cursor, limit: 37)
                    for change in page.changes { seen[change.entityID] = change.version }
                    cursor = page.cursor
                }
                while true {
                    let page = try await servers[0].pullOK(token: token, cursor: cursor, limit: 500)
                    for change in page.changes { seen[change.entityID] = change.version }
                    cursor = page.cursor
                    if !page.hasMore { return seen }
                }
            }
            var result: [String: Int64] = [:]
            for try await seen in group { if let seen { result = seen } }
            return result
        }
        #expect(seen.count == 6 * 30 * 25)
        let truth = try await servers[1].pullAll(token: token)
        #expect(Set(truth.values.map(\.entityID)) == Set(seen.keys))
    }

    @Test(
        "spaces across two processes: a grant on one and a revocation on the other while members push through both and a reader pulls alternating: the reader ends with what a fresh pull returns",
        arguments: StorageBackend.allCases
    )
    func spacesAcrossProcesses(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("multi-process-spaces")
        let database = try await TestDatabase.make(backend)
        let (processes, servers) = try await Self.serve(2, on: database, in: directory)
        defer { for process in processes { process.process.terminate() } }
        let alice = try await TestServer.token(for: "alice")
        let carol = try await TestServer.token(for: "carol")
        try await servers[0].makeSpace("team", admin: "alice", members: ["bob": .write, "dave": .write])
        try await servers[1].makeSpace("other", admin: "alice", members: ["carol": .read])
        _ = try await servers[1].pushOK(
            PushRequest(
                clientID: "a",
                mutations: [Mutation(id: 1, entity: "notes", entityID: "kept-out", op: .upsert, data: .value(1), space: "other")]
            ),
            token: alice
        )
        let store = try await withThrowingTaskGroup(of: [String: Int64]?.self) { group in
            for (index, writer) in ["bob", "dave"].enumerated() {
                group.addTask {
                    let token = try await TestServer.token(for: writer)
                    for batch in 0..<24 {
                        let mutations = (0..<25).map { item in
                            Mutation(
                                id: Int64(batch * 25 + item + 1),
                                entity: "tasks",
                                entityID: "\(writer)-\(batch)-\(item % 20)",
                                op: .upsert,
                                data: .value(Int64(batch)),
                                space: "team"
                            )
                        }
                        _ = try await servers[(index + batch) % 2].pushOK(
                            PushRequest(clientID: "\(writer)-phone", mutations: mutations),
                            token: token
                        )
                        if batch == 8 && index == 0 {
                            #expect(try await servers[0].grant(.read, to: "carol", in: "team", token: alice).status == 200)
                            #expect(try await servers[1].removeMember("carol", from: "other", token: alice).status == 204)
                        }
                    }
                    return nil
                }
            }
            group.addTask {
                var store: [String: Int64] = [:]
                var cursor: String?
                func page(_ server: RemoteServer, limit: Int) async throws -> Bool {
                    let page = try await server.pullOK(token: carol, cursor: cursor, limit: limit)
                    for change in page.changes { store["\(change.space ?? "-"):\(change.entityID)"] = change.version }
                    for space in page.revoked { store = store.filter { !$0.key.hasPrefix(space + ":") } }
                    cursor = page.cursor
                    return page.hasMore
                }
                for round in 0..<300 { _ = try await page(servers[round % 2], limit: 37) }
                while try await page(servers[0], limit: 500) {}
                return store
            }
            var result: [String: Int64] = [:]
            for try await store in group { if let store { result = store } }
            return result
        }
        let fresh = try await servers[1].pullAll(token: carol)
        #expect(fresh.count == 2 * 24 * 20)
        #expect(store == fresh.reduce(into: [:]) { $0[$1.key.replacingOccurrences(of: "tasks/", with: "")] = $1.value.version })
    }

    @Test("the rate limit is one quota per user whichever process answers: two processes on one PostgreSQL database allow it once")
    func sharedRateLimit() async throws {
        let directory = TestDirectory.make("multi-process-rate")
        let database = try await TestDatabase.make(.postgres)
        // 60 requests at once: no cap on requests in progress may refuse any before the quota does.
        let (processes, servers) = try await Self.serve(
            2,
            on: database,
            rateLimit: "30/3600",
            options: ["--max-requests-per-user", "100"],
            in: directory
        )
        defer { for process in processes { process.process.terminate() } }
        let alice = try await TestServer.token(for: "alice")
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for request in 0..<60 {
                group.addTask { try await servers[request % 2].pull(token: alice).status }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        // 30 per hour refills one request per 120 s: none within this test.
        #expect(statuses.filter { $0 == 200 }.count == 30)
        #expect(statuses.filter { $0 == 429 }.count == 30)
        let limited = try await servers[1].pull(token: alice)
        #expect(limited.status == 429)
        #expect(limited.headers["RateLimit-Remaining"] == ["0"])
        let bob = try await servers[0].pull(token: try await TestServer.token(for: "bob"))
        #expect(bob.status == 200)
        #expect(bob.headers["RateLimit-Remaining"] == ["29"])
    }

    static func expectSameResults(_ a: PushResponse, _ b: PushResponse) throws {
        guard a.lastMutationID == b.lastMutationID, a.results.count == b.results.count else {
            throw TestFailure("two answers to one batch differ: \(a) and \(b)")
        }
        for (x, y) in zip(a.results, b.results) where x.id != y.id || x.status != y.status || x.entityID != y.entityID || x.version != y.version {
            throw TestFailure(
                "mutation \(x.id) was answered \(x.status) v\(x.version.map(String.init) ?? "null") and \(y.status) v\(y.version.map(String.init) ?? "null")"
            )
        }
    }

    @Test(
        "two processes on one PostgreSQL database and one S3 bucket: an upload begun on one goes on and completes on the other, and every process serves it"
    )
    func attachmentsAcrossProcesses() async throws {
        let directory = TestDirectory.make("multi-process-attachments")
        let database = try await TestDatabase.make(.postgres)
        let (processes, servers) = try await Self.serve(2, on: database, options: ["--attachments", try BlobBackend.s3.url()], in: directory)
        defer { for process in processes { process.process.terminate() } }
        let (alice, bob) = (try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"))
        let bytes = AttachmentEndpointTests.photo(3_000_000, seed: 21)
        let digest = AttachmentEndpointTests.digest(bytes)
        let path = "/v1/attachments/\(digest)"
        let draft = [("Authorization", "Bearer \(alice)"), ("Ferry-Client-ID", "phone"), ("Upload-Draft-Interop-Version", "6")]
        let first = try await servers[0].perform(
            .POST,
            path,
            headers: draft + [("Upload-Complete", "?0"), ("Upload-Length", "3000000")],
            body: Data(bytes[..<1_200_000])
        )
        #expect(first.status == 204 && first.headers.first(name: "Upload-Offset") == "1200000", "\(first.status) \(first.errorMessage ?? "")")
        let held = try await servers[1].perform(.HEAD, path + "/upload", headers: draft, body: nil)
        #expect(held.headers.first(name: "Upload-Offset") == "1200000", "the other process finds the upload where the first left it")
        let rest = try await servers[1].perform(
            .PATCH,
            path + "/upload",
            headers: draft + [("Upload-Offset", "1200000"), ("Upload-Complete", "?1")],
            body: Data(bytes[1_200_000...])
        )
        #expect(rest.status == 201, "\(rest.status) \(rest.errorMessage ?? "")")
        try await servers[0].makeSpace("crew", admin: "alice", members: ["bob": .read])
        let job = Mutation(
            id: 1,
            entity: "jobs",
            entityID: "j1",
            op: .upsert,
            data: ["photo": .string(digest.description)],
            space: "crew",
            attachments: [digest.description]
        )
        #expect(try await servers[1].pushOK(PushRequest(clientID: "phone", mutations: [job]), token: alice).results[0].status == .applied)
        for server in servers {
            let read = try await server.perform(.GET, path, headers: [("Authorization", "Bearer \(bob)")], body: nil)
            #expect(read.status == 200 && Array(read.body) == bytes)
        }
    }
}
