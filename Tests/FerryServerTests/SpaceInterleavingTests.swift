import ConcurrencyExtras
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import PostgresNIO
import Testing

/// Pulls across spaces never skip or double a change, however grants, revocations, deletions and
/// other members' pushes fall between a pull's pages (PROTOCOL.md, "Spaces").
@Suite("Space interleavings", .timeLimit(.minutes(5)))
struct SpaceInterleavingTests {
    /// PROTOCOL.md, "Spaces": the memberships a page reports and the rows it returns are one
    /// view. Bob's pull of three spaces is paused after it read his memberships; meanwhile Alice
    /// removes him from one (answered 204) and then writes a secret into it. Whatever the page
    /// says of his memberships, it must not carry the secret, and the next pull reports the space
    /// revoked. (Seen failing on PostgreSQL with each statement of the pull in its own snapshot.)
    @Test(
        "a member removed while a pull reads, then the space written (through this server, or another on the same database), never receives what was written after the removal",
        arguments: StorageBackend.allCases,
        [false, true]
    )
    func removalDuringAPull(backend: StorageBackend, throughAnotherServer: Bool) async throws {
        try await TestServer.run(backend: backend) { server in
            if throughAnotherServer {
                try await TestServer.run(backend: backend, database: server.database) { other in
                    try await Self.removalDuringAPull(server, writer: other)
                }
            } else {
                try await Self.removalDuringAPull(server, writer: server)
            }
        }
    }

    /// `removalDuringAPull`: Bob pulls through `server`; Alice removes him and writes through `writer`.
    static func removalDuringAPull(_ server: TestServer, writer: TestServer) async throws {
        let alice = try await TestServer.token(for: "alice")
        let bob = try await TestServer.token(for: "bob")
        for space in ["s1", "s2", "s3"] { try await server.makeSpace(space, admin: "alice", members: ["bob": .read]) }
        let first = try await server.pullOK(token: bob)
        // Something moved in the space Bob is about to leave, so the next pull reads it.
        _ = try await server.pushOK(
            PushRequest(
                clientID: "alice-phone",
                mutations: [Mutation(id: 1, entity: "items", entityID: "open", op: .upsert, data: .value(1), space: "s2")]
            ),
            token: alice
        )
        let paused = LockIsolated(false)
        let removed = LockIsolated<[Int]>([])
        server.pullInterleaving.set {
            let first = paused.withValue { wasPaused in
                defer { wasPaused = true }
                return !wasPaused
            }
            guard first else { return }
            let done = DispatchSemaphore(value: 0)
            Task {
                defer { done.signal() }
                let removal = try await writer.removeMember("bob", from: "s2", token: alice)
                let secret = try await writer.push(
                    PushRequest(
                        clientID: "alice-phone",
                        mutations: [Mutation(id: 2, entity: "items", entityID: "secret", op: .upsert, data: .value(2), space: "s2")]
                    ),
                    token: alice
                )
                removed.withValue { $0 = [removal.status, secret.status] }
            }
            done.wait()
        }
        let page = try await server.pullOK(token: bob, cursor: first.cursor)
        server.pullInterleaving.set(nil)
        #expect(paused.value, "the pull read the spaces one by one")
        #expect(removed.value == [204, 200])
        #expect(page.changes.map(\.entityID) == ["open"], "\(page.changes.map { "\($0.space ?? "-"):\($0.entityID)" })")
        let next = try await server.pullOK(token: bob, cursor: page.cursor)
        #expect(next.changes.isEmpty)
        #expect(next.revoked == ["s2"] || page.revoked == ["s2"])
    }

    /// One device of Bob's, paging three changes at a time, with a seeded event between every
    /// two pages: Alice writes, updates or deletes in one of five spaces, Bob is granted or
    /// removed, a space is deleted and created again. Bob's store applies each page as a client
    /// does (changes, then dropping revoked spaces). Each record's versions must arrive in
    /// increasing order while Bob stays a member (no double), and once caught up his store
    /// must equal what a new device pulls from scratch (no skip). The order of events is the
    /// script's, not the scheduler's.
    @Test(
        "a pull paging through spaces while memberships and pushes change between its pages ends equal to a pull from scratch",
        arguments: StorageBackend.allCases
    )
    func scriptedInterleavings(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            let spaces = (1...5).map { "s\($0)" }
            for space in spaces { try await server.makeSpace(space, admin: "alice") }
            var random = SeededGenerator(seed: 29)
            var mutationID: Int64 = 0
            var bobsMutation: Int64 = 0
            var member: Set<String> = []
            var store: [String: Change] = [:]
            var lastVersion: [String: Int64] = [:]
            var cursor: String?
            var doubles: [String] = []
            var told: [Membership] = []

            func alicePushes(_ count: Int) async throws {
                let space = spaces.randomElement(using: &random)!
                var mutations: [Mutation] = []
                for _ in 0..<count {
                    mutationID += 1
                    let id = "r\(Int.random(in: 1...12, using: &random))"
                    mutations.append(
                        Int.random(in: 0..<5, using: &random) == 0
                            ? Mutation(id: mutationID, entity: "items", entityID: id, op: .delete, space: space)
                            : Mutation(id: mutationID, entity: "items", entityID: id, op: .upsert, data: .value(mutationID), space: space)
                    )
                }
                _ = try await server.pushOK(PushRequest(clientID: "alice-phone", mutations: mutations), token: alice)
            }

            func pullPage() async throws -> Bool {
                let page = try await server.pullOK(token: bob, cursor: cursor, limit: 3)
                for change in page.changes {
                    let key = "\(change.space ?? "-"):\(change.entityID)"
                    if let last = lastVersion[key], change.version <= last { doubles.append("\(key) v\(change.version) after v\(last)") }
                    lastVersion[key] = change.version
                    store[key] = change.op == .delete ? nil : change
                }
                for space in page.revoked {
                    store = store.filter { !$0.key.hasPrefix(space + ":") }
                    lastVersion = lastVersion.filter { !$0.key.hasPrefix(space + ":") }
                }
                // Left out when unchanged since the cursor: the memberships last told still hold.
                if let spaces = page.spaces { told = spaces }
                #expect(Set(told.map(\.space)) == member, "memberships as the page was read")
                cursor = page.cursor
                return page.hasMore
            }

            for step in 0..<80 {
                switch Int.random(in: 0..<10, using: &random) {
                case 0...3:
                    try await alicePushes(Int.random(in: 1...6, using: &random))
                case 4, 5:
                    let space = spaces.randomElement(using: &random)!
                    #expect(try await server.grant(.read, to: "bob", in: space, token: alice).status == 200)
                    member.insert(space)
                case 6:
                    let space = spaces.randomElement(using: &random)!
                    let answer = try await server.removeMember("bob", from: space, token: alice)
                    #expect(answer.status == (member.contains(space) ? 204 : 404))
                    member.remove(space)
                case 7:
                    let space = spaces.randomElement(using: &random)!
                    #expect(try await server.deleteSpace(space, token: alice).status == 204)
                    try await server.makeSpace(space, admin: "alice")
                    member.remove(space)
                case 8:
                    bobsMutation += 1
                    _ = try await server.pushOK(
                        PushRequest(
                            clientID: "bob-phone",
                            mutations: [.upsert(id: bobsMutation, entity: "notes", entityID: "n\(step % 4)", data: .value(1))]
                        ),
                        token: bob
                    )
                default:
                    break
                }
                _ = try await pullPage()
            }
            while try await pullPage() {}
            #expect(doubles.isEmpty, "changes delivered again: \(doubles)")
            var fresh: [String: Change] = [:]
            var freshCursor: String?
            repeat {
                let page = try await server.pullOK(token: bob, cursor: freshCursor, limit: 1000)
                for change in page.changes { fresh["\(change.space ?? "-"):\(change.entityID)"] = change }
                freshCursor = page.cursor
                if !page.hasMore { break }
            } while true
            #expect(store.mapValues(\.version) == fresh.mapValues(\.version), "the paged store against a pull from scratch")
            #expect(store.mapValues(\.data) == fresh.mapValues(\.data))
            #expect(!fresh.isEmpty)
        }
    }

    /// On PostgreSQL, with two processes: Alice's push into space `a` has taken its positions and
    /// is held inside its transaction (a trigger waits on an advisory lock the test holds); Bob's
    /// push into space `b` commits meanwhile (pushes to different spaces do not wait for each
    /// other), and his push into `a` waits behind Alice's. Carol, who reads both, pulls in
    /// between: her cursor must not pass either `a` push, which commit after her pull.
    @Test("a push into one space that commits late is never skipped by a pull that read another space's later commit")
    func lateCommitAcrossSpaces() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try await database.open()
        let service = Caller(userID: "backend", isService: true)
        for space in ["a", "b"] {
            _ = try await storage.createSpace(space, by: service)
            _ = try await storage.setRole(.write, of: "alice", in: space, by: service)
            _ = try await storage.setRole(.write, of: "bob", in: space, by: service)
            _ = try await storage.setRole(.read, of: "carol", in: space, by: service)
        }
        func push(_ storage: any SyncStorage, _ user: String, _ id: Int64, _ entity: String, into space: String) async throws -> PushResponse {
            try await storage.push(
                caller: Caller(userID: user),
                clientID: "\(user)-phone",
                mutations: [IncomingMutation(Mutation(id: id, entity: entity, entityID: entity, op: .upsert, data: .value(id), space: space))]
            )
        }
        _ = try await push(storage, "alice", 1, "early", into: "a")
        try await database.execute(
            """
            CREATE FUNCTION hold_slow() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$
            """
        )
        try await database.execute(
            "CREATE TRIGGER hold_slow BEFORE INSERT ON records FOR EACH ROW WHEN (NEW.entity = 'slow') EXECUTE FUNCTION hold_slow()"
        )
        let otherProcess = try await database.open()
        try await TestPostgres.withConnection(to: location) { gate in
            _ = try await gate.query("SELECT pg_advisory_lock(4242)", logger: .init(label: "test"))
            let slow = Task { try await push(storage, "alice", 2, "slow", into: "a") }
            try await PostgresStorageTests.waitForWaiters(1, on: gate)
            // Another space: commits while the first push is held.
            #expect(try await push(otherProcess, "bob", 1, "fast", into: "b").results.first?.status == .applied)
            let afterDone = PostgresStorageTests.Flag()
            let after = Task {
                defer { Task { await afterDone.set() } }
                return try await push(otherProcess, "bob", 2, "after", into: "a")
            }
            // Bob's push into `a` waits for Alice's lock on the space (one more waiter), or has committed.
            try await waitForLockWaiters(on: gate, orUntil: { await afterDone.isSet })
            let during = try await storage.pull(userID: "carol", cursor: nil, limit: 10, ownWrites: nil)
            _ = try await gate.query("SELECT pg_advisory_unlock(4242)", logger: .init(label: "test"))
            _ = try await slow.value
            _ = try await after.value
            let then = try await storage.pull(userID: "carol", cursor: during.cursor, limit: 10, ownWrites: nil)
            let (first, second) = (try PostgresStorageTests.entities(during), try PostgresStorageTests.entities(then))
            #expect(first.sorted() == ["early", "fast"], "pulled while the push into a was held: \(first)")
            #expect((first + second).sorted() == ["after", "early", "fast", "slow"], "pulled while held: \(first); after: \(second)")
        }
        try await otherProcess.close()
        try await storage.close()
    }

    /// Waits until some session waits for a row lock (Bob's push behind Alice's space lock), or `done`.
    private func waitForLockWaiters(on connection: PostgresConnection, orUntil done: () async -> Bool) async throws {
        while true {
            var waiting = 0
            for try await n in try await connection.query(
                "SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')",
                logger: .init(label: "test")
            ).decode(Int.self) {
                waiting = n
            }
            if waiting >= 1 { return }
            if await done() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// A membership change racing a push: the whole batch is judged by one reading of the memberships.
@Suite("Spaces: a revocation racing a push", .timeLimit(.minutes(3)))
struct SpaceRaceTests {
    @Test(
        "a push of 50 changes into a space while its writer is removed is applied whole or refused whole, never half",
        arguments: StorageBackend.allCases
    )
    func revocationRacingAPush(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            try await server.makeSpace("team", admin: "alice", members: ["bob": .write])
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            var outcomes: [String: Int] = [:]
            for round in 0..<20 {
                let mutations = (0..<50).map { index in
                    Mutation(
                        id: Int64(round * 50 + index + 1),
                        entity: "tasks",
                        entityID: "r\(round)-\(index)",
                        op: .upsert,
                        data: .value(Int64(index)),
                        space: "team"
                    )
                }
                async let pushed = server.pushOK(PushRequest(clientID: "bob-phone", mutations: mutations), token: bob)
                async let removed = server.removeMember("bob", from: "team", token: alice)
                let (answer, removal) = try await (pushed, removed)
                #expect(removal.status == 204)
                let statuses = Set(answer.results.map(\.status))
                #expect(statuses.count == 1, "round \(round): one judgement for the whole batch, got \(answer.results.map(\.status.rawValue))")
                outcomes[statuses.first?.rawValue ?? "-", default: 0] += 1
                let stored = try await server.pullAll(token: alice).keys.filter { $0.hasPrefix("team:tasks/r\(round)-") }.count
                #expect(stored == (statuses == [.applied] ? 50 : 0), "round \(round): \(stored) stored")
                #expect(try await server.grant(.write, to: "bob", in: "team", token: alice).status == 200)
            }
            #expect(outcomes.values.reduce(0, +) == 20, "\(outcomes)")
        }
    }
}
