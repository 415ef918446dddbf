import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Logging
import PostgresNIO
import Testing

/// What only the PostgreSQL engine has to prove: commits that finish out of order, several
/// processes migrating at once, and its URL. The rules both engines share are in the
/// suites that take a `StorageBackend`.
@Suite("PostgreSQL storage", .timeLimit(.minutes(2)))
struct PostgresStorageTests {
    /// A push that has taken its change positions but not yet committed, while another push
    /// of the same user commits: a pull in between must not move its cursor past the first.
    ///
    /// The first push is held inside its transaction by a trigger waiting on an advisory
    /// lock the test holds, so the order of events is forced, not hoped for.
    @Test("a push that commits late is never skipped by a pull that ran while it was in flight")
    func lateCommitIsNotSkipped() async throws {
        let database = try await TestDatabase.make(.postgres)
        let storage = try await database.open()
        guard case .postgres(let location) = database.url else { return }
        // Alice has pushed before: her row of user_changes exists (a first push creates it).
        _ = try await storage.push(
            userID: "alice",
            clientID: "phone",
            mutations: [IncomingMutation(.upsert(id: 1, entity: "early", entityID: "e", data: .value(1)))]
        )
        try await database.execute(
            """
            CREATE FUNCTION hold_slow() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$
            """
        )
        try await database.execute(
            "CREATE TRIGGER hold_slow BEFORE INSERT ON records FOR EACH ROW WHEN (NEW.entity = 'slow') EXECUTE FUNCTION hold_slow()"
        )

        try await TestPostgres.withConnection(to: location) { gate in
            _ = try await gate.query("SELECT pg_advisory_lock(4242)", logger: .init(label: "test"))
            let slow = Task {
                try await storage.push(
                    userID: "alice",
                    clientID: "phone",
                    mutations: [IncomingMutation(.upsert(id: 2, entity: "slow", entityID: "a", data: .value(1)))]
                )
            }
            try await Self.waitForWaiters(1, on: gate)
            // The other push comes from a second process (a storage of its own): within one
            // process, a user's pushes already wait for each other before the database.
            let otherProcess = try await database.open()
            let fastDone = Flag()
            let fast = Task {
                defer { Task { await fastDone.set() } }
                return try await otherProcess.push(
                    userID: "alice",
                    clientID: "laptop",
                    mutations: [IncomingMutation(.upsert(id: 1, entity: "fast", entityID: "b", data: .value(1)))]
                )
            }
            // The second push either waits for the first (one more lock waiter) or has committed.
            try await Self.waitForWaiters(2, on: gate, orUntil: { await fastDone.isSet })
            let during = try await storage.pull(userID: "alice", cursor: nil, limit: 10, ownWrites: nil)
            _ = try await gate.query("SELECT pg_advisory_unlock(4242)", logger: .init(label: "test"))
            _ = try await slow.value
            _ = try await fast.value
            let after = try await storage.pull(userID: "alice", cursor: during.cursor, limit: 10, ownWrites: nil)
            let (first, then) = (try Self.entities(during), try Self.entities(after))
            #expect((first + then).sorted() == ["early", "fast", "slow"], "pulled while the first push was in flight: \(first); after: \(then)")
            try await otherProcess.close()
        }
        try await storage.close()
    }

    @Test("eight processes' worth of storages connecting at once to a new database migrate it once, and all of them work")
    func concurrentMigrations() async throws {
        let location = try await TestPostgres.createDatabase()
        let storages = try await withThrowingTaskGroup(of: PostgresSyncStorage.self) { group in
            for _ in 0..<8 { group.addTask { try await PostgresSyncStorage.connect(to: location, poolSize: 2) } }
            return try await group.reduce(into: [PostgresSyncStorage]()) { $0.append($1) }
        }
        let versions = try await TestPostgres.withConnection(to: location) { connection in
            var versions: [Int] = []
            for try await version in try await connection.query("SELECT version FROM ferry_migrations", logger: .init(label: "test")).decode(Int.self)
            {
                versions.append(version)
            }
            return versions
        }
        #expect(versions == Array(1...10))  // 10: the side effects of the app's rules
        // Cursors are shared: each storage reads the one secret the first migration stored.
        _ = try await storages[0].push(
            userID: "u",
            clientID: "c",
            mutations: [IncomingMutation(.upsert(id: 1, entity: "e", entityID: "1", data: .value(1)))]
        )
        let cursor = try await storages[1].pull(userID: "u", cursor: nil, limit: 10, ownWrites: nil).cursor
        for storage in storages { #expect(try await storage.pull(userID: "u", cursor: cursor, limit: 10, ownWrites: nil).count == 0) }
        for storage in storages { try await storage.close() }
    }

    @Test("a database a newer Ferry migrated is refused, naming both schema versions")
    func newerSchemaIsRefused() async throws {
        let database = try await TestDatabase.make(.postgres)
        try await database.open().close()
        try await database.execute("INSERT INTO ferry_migrations (version, name) VALUES (99, 'from the future')")
        guard case .postgres(let location) = database.url else { return }
        let error = await #expect(throws: StorageError.self) { try await PostgresSyncStorage.connect(to: location) }
        #expect("\(error.map { "\($0)" } ?? "")".contains("schema version 99"))
    }

    @Test("a PostgreSQL that cannot be reached, or a database that does not exist, is refused at start with the reason")
    func unreachable() async throws {
        var location = try TestPostgres.clusterLocation()
        location.database = "no_such_database"
        let missing = await #expect(throws: StorageError.self) { try await PostgresSyncStorage.connect(to: location) }
        #expect("\(missing.map { "\($0)" } ?? "")".contains("no_such_database"), "\(String(describing: missing))")

        // Port 1: nothing listens there, so the connection is refused at once.
        let nowhere = PostgresLocation(host: "127.0.0.1", port: 1, username: "ferry", database: "ferry")
        let refused = await #expect(throws: StorageError.self) { try await PostgresSyncStorage.connect(to: nowhere) }
        #expect("\(refused.map { "\($0)" } ?? "")".contains("127.0.0.1:1/ferry"), "\(String(describing: refused))")
    }

    @Test("when PostgreSQL goes away under a running server, requests fail as unavailable (503) within the deadline instead of waiting on the pool")
    func databaseGoneWhileRunning() async throws {
        let location = try await TestPostgres.createDatabase()
        let storage = try await PostgresSyncStorage.connect(to: location, poolSize: 2, deadline: .seconds(5))
        try await storage.checkHealth()
        // Dropping the database ends the pool's connections, and every new one is refused.
        try await TestPostgres.withConnection(to: try TestPostgres.clusterLocation()) { admin in
            _ = try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE \(location.database) WITH (FORCE)"), logger: .init(label: "test"))
        }
        await #expect(throws: StorageError.self) { try await storage.checkHealth() }
        await #expect(throws: StorageError.self) {
            try await storage.push(userID: "u", clientID: "c", mutations: [IncomingMutation(.delete(id: 1, entity: "e", entityID: "x"))])
        }
        await #expect(throws: StorageError.self) { try await storage.pull(userID: "u", cursor: nil, limit: 10, ownWrites: nil) }
        try await storage.close()
    }

    @Test(
        "one user's burst of pushes waits in memory, not on pooled connections: other users and the health check are served while the user's lock is held"
    )
    func burstDoesNotTakeThePool() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try await PostgresSyncStorage.connect(to: location, poolSize: 2, deadline: .seconds(30))
        func push(_ user: String, client: String, id: Int64) async throws -> PushResponse {
            try await storage.push(
                userID: user,
                clientID: client,
                mutations: [IncomingMutation(.upsert(id: id, entity: "e", entityID: "\(client)-\(id)", data: .value(id)))]
            )
        }
        _ = try await push("alice", client: "first", id: 1)
        let burst = try await Self.holdingAlicesLock(in: location) { holder in
            let burst = Task {
                try await withThrowingTaskGroup(of: PushResponse.self) { group in
                    for device in 0..<8 { group.addTask { try await push("alice", client: "device-\(device)", id: 1) } }
                    return try await group.reduce(into: [PushResponse]()) { $0.append($1) }
                }
            }
            try await Self.waitForWaiters(1, on: holder)
            // Alice's pushes hold at most one of the two connections: Bob and health get the other.
            #expect(try await push("bob", client: "phone", id: 1).results.first?.status == .applied)
            try await storage.checkHealth()
            return burst
        }
        #expect(try await burst.value.allSatisfy { $0.results.first?.status == .applied })
        try await storage.close()
    }

    @Test("a push queued behind its user's stuck push is answered unavailable at the deadline, and leaves the line: later pushes still run")
    func queuedPushMeetsTheDeadline() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        // Long enough for a loaded machine to open a connection; well under the 10 s lock_timeout
        // that the stuck push waits on meanwhile.
        let storage = try await PostgresSyncStorage.connect(to: location, poolSize: 4, deadline: .seconds(4))
        func push(_ client: String) async throws -> PushResponse {
            try await storage.push(
                userID: "alice",
                clientID: client,
                mutations: [IncomingMutation(.upsert(id: 1, entity: "e", entityID: client, data: .value(1)))]
            )
        }
        _ = try await push("first")
        let stuck = try await Self.holdingAlicesLock(in: location) { holder in
            let stuck = Task { try await push("stuck") }  // leased, waiting for the lock
            try await Self.waitForWaiters(1, on: holder)
            await #expect(throws: StorageError.self) { try await push("queued") }
            return stuck
        }
        #expect(try await stuck.value.results.first?.status == .applied)
        // The withdrawn push left no one waiting for a turn that never comes.
        #expect(try await push("later").results.first?.status == .applied)
        try await storage.close()
    }

    @Test(
        "values PostgreSQL cannot hold are refused by the protocol's rules on both engines, never a 500: NUL in a natural key, a grapheme of 1,500 code points, a token's sub with NUL",
        arguments: StorageBackend.allCases
    )
    func valuesBeyondTheDatabase(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let longest = String(repeating: "😀", count: 128)  // 128 code points, 512 bytes: fits
            let answer = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        .upsert(id: 1, entity: "e", entityID: "nul", data: .value(1), naturalKey: "a\u{0}b"),
                        .upsert(id: 2, entity: "e", entityID: "a" + String(repeating: "\u{301}", count: 1500), data: .value(1)),
                        .upsert(id: 3, entity: "e", entityID: longest, data: .value(1), naturalKey: String(repeating: "😀", count: 256)),
                    ]
                ),
                token: token
            )
            #expect(answer.results.map(\.status) == [.rejected, .rejected, .applied], "\(answer.results)")
            #expect(answer.results[0].error?.contains("U+0000") == true)
            #expect(answer.results[1].error?.contains("128") == true)
            #expect(try await server.pullAll(token: token)["e/\(longest)"]?.version == 1)
            let reply = try await server.pull(token: try await TestServer.token(for: "bad\u{0}user"))
            #expect(reply.status == 401)
        }
    }

    @Test("--database URLs: sqlite and postgres forms, sslmode, PGPASSWORD, and clear refusals that never print the password")
    func urls() throws {
        #expect(try DatabaseURL(parsing: "sqlite:a.sqlite") == .sqlite(path: "a.sqlite"))
        #expect(try DatabaseURL(parsing: "sqlite::memory:") == .sqlite(path: nil))
        let full = try DatabaseURL(parsing: "postgres://ferry:p%40ss@db.internal:6543/sync?sslmode=require", environment: [:])
        #expect(
            full == .postgres(PostgresLocation(host: "db.internal", port: 6543, username: "ferry", password: "p@ss", database: "sync", tls: .require))
        )
        #expect(full.description == "postgres://ferry@db.internal:6543/sync?sslmode=require")
        let fromEnvironment = try DatabaseURL(parsing: "postgresql://ferry@[::1]/sync", environment: ["PGPASSWORD": "secret"])
        #expect(fromEnvironment == .postgres(PostgresLocation(host: "::1", port: 5432, username: "ferry", password: "secret", database: "sync")))
        for (bad, says) in [
            ("mysql://x@y/z", "sqlite:PATH"),
            ("sqlite:", "sqlite:PATH"),
            ("postgres://db.internal/sync", "no user"),
            ("postgres://ferry@/sync", "no host"),
            ("postgres://ferry:hunter2@db.internal", "no database"),
            ("postgres://ferry:hunter2@db.internal/sync?sslmode=maybe", "sslmode=maybe"),
            ("postgres://ferry@db.internal/sync?timeout=3", "'timeout'"),
            ("postgres://ferry:hun#ter2@db.internal/sync", "ferry:***@db.internal"),
            ("postgres://ferry@db.internal/sync?sslmode=require&sslmode=disable", "'sslmode' twice"),
            ("postgres://ferry@db.internal/sync?password=hunter2", "password=***"),
            ("host=db.internal password=hunter2", "password=***"),
            ("postgres://ferry:hunter2/x@db.internal", "postgres://ferry:***@db.internal"),
        ] {
            #expect {
                try DatabaseURL(parsing: bad, environment: [:])
            } throws: { error in
                let text = "\(error)"
                return text.contains(says) && !text.contains("hunter2")
            }
        }
    }

    /// Runs `body` while another session holds alice's row of `user_changes`, as a push of
    /// another process would, and commits that session once `body` returns.
    static func holdingAlicesLock<T: Sendable>(in location: PostgresLocation, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await TestPostgres.withConnection(to: location) { holder in
            let test = Logger(label: "test")
            _ = try await holder.query("BEGIN", logger: test)
            _ = try await holder.query("SELECT position FROM user_changes WHERE user_id = 'alice' FOR UPDATE", logger: test).collect()
            let value = try await body(holder)
            _ = try await holder.query("COMMIT", logger: test)
            return value
        }
    }

    actor Flag {
        private(set) var isSet = false
        func set() { isSet = true }
    }

    static func entities(_ page: PullPage) throws -> [String] {
        try JSONDecoder().decode(PullResponse.self, from: Data(page.responseBody().readableBytesView)).changes.map(\.entity)
    }

    /// Waits until `count` sessions of this test's database wait for a lock (or `done` says
    /// there is nothing to wait for).
    static func waitForWaiters(_ count: Int, on connection: PostgresConnection, orUntil done: () async -> Bool = { false }) async throws {
        while true {
            var waiting = 0
            for try await n in try await connection.query(
                "SELECT count(*)::int8 FROM pg_locks WHERE NOT granted AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())",
                logger: .init(label: "test")
            )
            .decode(Int64.self) {
                waiting = Int(n)
            }
            if waiting >= count { return }
            if await done() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
