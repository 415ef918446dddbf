import ConcurrencyExtras
import FerryProtocol
import FerryRules
import FerryTestSupport
import Foundation
import Logging
import Testing

@testable import FerryServer

/// The side effects the app's rules ask for (PROTOCOL.md, "Rules"): written with the write that
/// asked, in its transaction, and delivered after the commit, each once, whatever is resent,
/// lost, killed or run twice.
@Suite("Side effects of the app's rules", .timeLimit(.minutes(2)))
struct SideEffectTests {
    /// One email when a job is done: only on the write that makes it so.
    struct JobDone: WriteRule {
        let entities: Set<String> = ["jobs"]

        func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
            if write.data?["title"]?.stringValue == "later" { throw RuleUnavailable("mail service down") }
            return .accept
        }

        func effects(of write: ProposedWrite) -> [SideEffect] {
            guard write.data?["status"] == .string("done"), write.current?.data?["status"] != .string("done") else { return [] }
            return [SideEffect(kind: "email.job_done", payload: ["job": .string(write.entityID)])]
        }
    }

    /// Records every delivery; fails the first `failures` of them.
    final class Mailbox: SideEffectHandler, Sendable {
        let delivered = LockIsolated<[DeliverableEffect]>([])
        let failures: LockIsolated<Int>
        /// The key of each delivery, as it happens.
        let arrivals: AsyncStream<String>
        private let arrived: AsyncStream<String>.Continuation

        init(failures: Int = 0) {
            self.failures = LockIsolated(failures)
            (arrivals, arrived) = AsyncStream.makeStream(of: String.self)
        }

        func deliver(_ effect: DeliverableEffect) async throws {
            let fail = failures.withValue { remaining in
                defer { remaining = max(0, remaining - 1) }
                return remaining > 0
            }
            if fail { throw MailServerDown() }
            delivered.withValue { $0.append(effect) }
            arrived.yield(effect.key)
        }

        var keys: [String] { delivered.value.map(\.key) }
        struct MailServerDown: Error {}
    }

    static let rules = ServerRules([JobDone()])
    static let quiet: Logger = {
        var logger = Logger(label: "ferry.test.effects")
        logger.logLevel = .critical
        return logger
    }()

    static func worker(_ storage: any SyncStorage, _ mailbox: Mailbox, now: LockIsolated<Int64>? = nil) -> SideEffectWorker {
        var worker = SideEffectWorker(storage: storage, handler: mailbox, metrics: ServerMetrics(), logger: quiet)
        if let now { worker.now = { now.value } }
        return worker
    }

    static func done(_ id: Int64, _ job: String, title: String = "Roof") -> Mutation {
        .upsert(id: id, entity: "jobs", entityID: job, data: ["title": .string(title), "status": .string("done")])
    }

    static func push(_ storage: any SyncStorage, _ mutations: [Mutation], client: String = "phone") async throws -> PushResponse {
        try await storage.push(caller: Caller(userID: "carol"), clientID: client, mutations: mutations.map { IncomingMutation($0) }, rules: rules)
    }

    @Test(
        "an effect is written with its write and delivered once: a resend (a lost answer) asks for nothing more",
        arguments: StorageBackend.allCases
    )
    func onceThroughResend(backend: StorageBackend) async throws {
        let database = try await TestDatabase.make(backend)
        let storage = try await database.open()
        let batch = [Self.done(1, "j1"), Self.done(2, "j2"), .upsert(id: 3, entity: "jobs", entityID: "j3", data: ["title": .string("open")])]
        let first = try await Self.push(storage, batch)
        let again = try await Self.push(storage, batch)
        #expect(first.results.map(\.status) == [.applied, .applied, .applied])
        #expect(again.results.map(\.status) == first.results.map(\.status))
        #expect(try await storage.pendingSideEffects() == 2)
        let mailbox = Mailbox()
        #expect(await Self.worker(storage, mailbox).deliverDue() == 2)
        #expect(await Self.worker(storage, mailbox).deliverDue() == 0)
        #expect(mailbox.keys.map(Self.named) == ["carol/phone/1/0", "carol/phone/2/0"])
        #expect(mailbox.delivered.value.first?.payload == ["job": .string("j1")] && mailbox.delivered.value.first?.attempt == 1)
        #expect(try await storage.pendingSideEffects() == 0)
        // The job done again asks for nothing: the rule sees it was.
        _ = try await Self.push(storage, [Self.done(4, "j1", title: "Roof, again")])
        #expect(try await storage.pendingSideEffects() == 0)
        // Another device's job done under another id but the same natural key is the same job:
        // merged into it, which the rule sees is done already.
        var same = Self.done(1, "j1-tablet")
        same.naturalKey = "job-1"
        var keyed = Self.done(5, "j1")
        keyed.naturalKey = "job-1"
        _ = try await Self.push(storage, [keyed])
        let merged = try await Self.push(storage, [same], client: "tablet")
        #expect(merged.results.map(\.status) == [.merged])
        #expect(try await storage.pendingSideEffects() == 0, "no second email for one job")
        try await storage.close()
    }

    /// A webhook for every saved note, named by the request the note answers when it has one.
    struct NoteSaved: WriteRule {
        let entities: Set<String> = ["notes"]
        func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision { .accept }
        func effects(of write: ProposedWrite) -> [SideEffect] {
            [SideEffect(kind: "webhook.note", payload: ["note": .string(write.entityID)], key: write.data?["request"]?.stringValue)]
        }
    }

    @Test(
        "an effect the app names is kept once whoever asks: a restored store sending its change again as a new client, another user, two writes of one push; unnamed ones stay each write's own",
        arguments: StorageBackend.allCases
    )
    func onceByTheAppsKey(backend: StorageBackend) async throws {
        let storage = try await TestDatabase.make(backend).open()
        let rules = ServerRules([NoteSaved()])
        func push(_ user: String, _ client: String, _ mutations: [Mutation]) async throws {
            let response = try await storage.push(
                caller: Caller(userID: user),
                clientID: client,
                mutations: mutations.map { IncomingMutation($0) },
                rules: rules
            )
            #expect(response.results.allSatisfy { $0.status == .applied })
        }
        func note(_ id: Int64, _ note: String, request: String?) -> Mutation {
            .upsert(id: id, entity: "notes", entityID: note, data: ["request": request.map(JSONValue.string) ?? .null])
        }
        try await push("carol", "phone", [note(1, "n1", request: "r-1")])
        try await push("carol", "phone-restored", [note(1, "n1", request: "r-1")])  // the backup's copy of the queued change
        try await push("dave", "laptop", [note(1, "n2", request: "r-1"), note(2, "n3", request: "r-1")])
        #expect(try await storage.pendingSideEffects() == 1)
        try await push("carol", "phone", [note(2, "n1", request: nil), note(3, "n1", request: nil)])
        #expect(try await storage.pendingSideEffects() == 3, "without the app's key, each write asks for its own")
        let mailbox = Mailbox()
        #expect(await Self.worker(storage, mailbox).deliverDue() == 3)
        #expect(mailbox.keys.map(Self.named).sorted() == ["app/12:webhook.note/r-1", "carol/phone/2/0", "carol/phone/3/0"])
        try await push("carol", "phone-restored", [note(2, "n1", request: "r-1")])
        #expect(try await storage.pendingSideEffects() == 0, "delivered already: not asked again")
        // A key no service would take refuses that write alone, the same on both engines.
        let bad = try await storage.push(
            caller: Caller(userID: "carol"),
            clientID: "phone",
            mutations: [note(4, "n4", request: ""), note(5, "n5", request: String(repeating: "k", count: 201)), note(6, "n6", request: "r-6")]
                .map { IncomingMutation($0) },
            rules: rules
        )
        #expect(bad.results.map(\.status) == [.rejected, .rejected, .applied])
        #expect(bad.results.prefix(2).allSatisfy { $0.code == ErrorCode.ruleFailed.rawValue })
        try await storage.close()
    }

    @Test("a push a rule says not now to writes no effect; a refused or conflicting write asks for none", arguments: StorageBackend.allCases)
    func onlyAppliedWritesAsk(backend: StorageBackend) async throws {
        let storage = try await TestDatabase.make(backend).open()
        await #expect(throws: RuleUnavailable.self) {
            _ = try await Self.push(storage, [Self.done(1, "j1"), Self.done(2, "j2", title: "later")])
        }
        #expect(try await storage.pendingSideEffects() == 0)
        var conflicting = Self.done(1, "j3")
        conflicting.baseVersion = 7
        let response = try await Self.push(storage, [conflicting])
        #expect(response.results.map(\.status) == [.conflict])
        #expect(try await storage.pendingSideEffects() == 0)
        try await storage.close()
    }

    @Test("a delivery that fails is tried again after its backoff, with the same key; one a killed worker held is taken again after its lease")
    func retriesAndLeases() async throws {
        let storage = try await TestDatabase.make(.sqlite).open()
        _ = try await Self.push(storage, [Self.done(1, "j1"), Self.done(2, "j2")])
        let now = LockIsolated<Int64>(1_900_000_000_000)
        let mailbox = Mailbox(failures: 1)
        // A worker takes j2's effect and dies before finishing it.
        let held = try await storage.claimSideEffects(limit: 1, now: now.value, lease: 300_000)
        #expect(held.map(\.key).map(Self.named) == ["carol/phone/1/0"])
        let worker = Self.worker(storage, mailbox, now: now)
        #expect(await worker.deliverDue() == 1)  // j2's, which fails
        #expect(mailbox.keys.isEmpty)
        #expect(await worker.deliverDue() == 0, "neither is due: one waits for its backoff, the other for its lease")
        now.withValue { $0 += 1_000 }
        #expect(await worker.deliverDue() == 1)
        #expect(mailbox.delivered.value.map(\.attempt) == [2] && mailbox.keys.map(Self.named) == ["carol/phone/2/0"])
        now.withValue { $0 += 300_000 }
        #expect(await worker.deliverDue() == 1)
        #expect(mailbox.keys.map(Self.named) == ["carol/phone/2/0", "carol/phone/1/0"])
        #expect(mailbox.delivered.value.last?.attempt == 2, "the killed worker's attempt counts")
        #expect(try await storage.pendingSideEffects() == 0)
        try await storage.close()
    }

    @Test("a worker gives back what it has not begun within half its lease: a slow delivery never lets another process deliver the same effect")
    func slowDeliveryGivesBack() async throws {
        let storage = try await TestDatabase.make(.sqlite).open()
        _ = try await Self.push(storage, [Self.done(1, "j1"), Self.done(2, "j2")])
        let now = LockIsolated<Int64>(1_900_000_000_000)
        /// Each delivery takes 200 s of the worker's clock, past half the 300 s lease.
        final class SlowMailbox: SideEffectHandler, Sendable {
            let now: LockIsolated<Int64>
            let keys = LockIsolated<[String]>([])
            init(now: LockIsolated<Int64>) { self.now = now }
            func deliver(_ effect: DeliverableEffect) async throws {
                now.withValue { $0 += 200_000 }
                keys.withValue { $0.append(effect.key) }
            }
        }
        let mailbox = SlowMailbox(now: now)
        var worker = SideEffectWorker(storage: storage, handler: mailbox, metrics: ServerMetrics(), logger: Self.quiet)
        worker.now = { now.value }
        #expect(await worker.deliverDue() == 2)
        #expect(mailbox.keys.value.map(Self.named) == ["carol/phone/1/0"], "the second was given back, not begun")
        let other = try await storage.claimSideEffects(limit: 10, now: now.value, lease: 300_000)
        #expect(other.map(\.key).map(Self.named) == ["carol/phone/2/0"], "another process may take it at once")
        try await storage.close()
    }

    @Test("two server processes on one PostgreSQL database deliver 300 effects between them, each once")
    func twoProcesses() async throws {
        guard StorageBackend.allCases.contains(.postgres) else { return }
        let database = try await TestDatabase.make(.postgres)
        let (first, second) = (try await database.open(), try await database.open())
        for start in stride(from: 1, through: 300, by: 100) {
            _ = try await Self.push(first, (start..<(start + 100)).map { Self.done(Int64($0), "j\($0)") })
        }
        let mailbox = Mailbox()
        async let a: Void = Self.drain(Self.worker(first, mailbox))
        async let b: Void = Self.drain(Self.worker(second, mailbox))
        _ = await (a, b)
        #expect(mailbox.keys.count == 300)
        #expect(Set(mailbox.keys).count == 300)
        try await first.close()
        try await second.close()
    }

    static func drain(_ worker: SideEffectWorker) async {
        var idle = 0
        while idle < 3 { idle = await worker.deliverDue() == 0 ? idle + 1 : 0 }
    }

    @Test("a server stopped between the commit and the delivery: the next one delivers what was asked, once", arguments: StorageBackend.allCases)
    func restartBeforeDelivery(backend: StorageBackend) async throws {
        let database = try await TestDatabase.make(backend)
        try await TestServer.run(backend: backend, database: database, rules: Self.rules) { server in
            let token = try await TestServer.token(for: "carol")
            _ = try await server.pushOK(PushRequest(clientID: "phone", mutations: [Self.done(1, "j1")]), token: token)
        }
        let mailbox = Mailbox()
        try await TestServer.run(backend: backend, database: database, rules: Self.rules, sideEffects: mailbox) { _ in
            for await _ in mailbox.arrivals.prefix(1) {}
        }
        #expect(mailbox.keys.map(Self.named) == ["carol/phone/1/0"])
    }

    /// A key without when it was asked: the writer, its client, the mutation and the effect's place.
    static func named(_ key: String) -> String { String(key.prefix { $0 != "@" }) }
}
