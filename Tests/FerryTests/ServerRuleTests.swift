import Clocks
import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryRules
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// The app's rules on the server (PROTOCOL.md, "Rules"), end to end through a real client, on
/// both storage engines: accept, rewrite, reject with the app's code, a rule that throws, and
/// one that says "not now".
@Suite("The app's rules on the server", .timeLimit(.minutes(1)))
struct ServerRuleTests {
    /// A field-service company's rules over its jobs.
    struct JobRules: WriteRule {
        let entities: Set<String> = ["jobs"]

        func reads(for write: ProposedWrite) -> [RecordRef] {
            (write.data?["photo"]?.stringValue).map { [RecordRef(entity: "photos", entityID: $0)] } ?? []
        }

        func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
            guard var data = write.data else { return .accept }  // deleting a job is anyone's
            if data["title"]?.stringValue == "boom" { throw Defect() }
            if data["title"]?.stringValue == "later" { throw RuleUnavailable("the mail service is down", retryAfter: 1) }
            if let amount = data["amount"]?.numberValue, amount <= 0 {
                return .reject(code: "amount_not_positive", message: "The amount must be more than zero.", details: ["field": .string("amount")])
            }
            if data["status"]?.stringValue == "done" {
                let photo = (data["photo"]?.stringValue).flatMap { reads.data(of: RecordRef(entity: "photos", entityID: $0)) }
                guard photo != nil else {
                    return .reject(code: "job_closed_without_photo", message: "Take a photo of the finished job before closing it.")
                }
            }
            data["updated_by"] = .string(write.user)  // set by the server, never trusted from a phone
            return .rewrite(data)
        }

        struct Defect: Error {}
    }

    static let rules = ServerRules([JobRules()])
    static let photos = SyncedTable(table: "photos")

    static func openStore(_ name: String, detectsConflicts: Bool = false) throws -> FerryStore {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, title TEXT, amount REAL, status TEXT, photo TEXT, updated_by TEXT);
                    CREATE TABLE photos (id TEXT PRIMARY KEY NOT NULL, caption TEXT);
                    """
            )
        }
        let path = TestDirectory.make("rules").appendingPathComponent("\(name).sqlite").path
        return try FerryStore(path: path, schema: migrator, tables: [SyncedTable(table: "jobs", detectsConflicts: detectsConflicts), photos])
    }

    static func client(_ store: FerryStore, _ server: TestServer, user: String = "alice") -> FerryClient {
        FerryClient(
            store: store,
            transport: URLSessionTransport(baseURL: URL(string: server.baseURL)!),
            token: { try await TestServer.token(for: user) },
            clock: ImmediateClock()
        )
    }

    static func job(_ id: String, in store: FerryStore) async throws -> [String: String?] {
        try await store.database.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT title, status, updated_by, amount FROM jobs WHERE id = ?", arguments: [id]) else {
                return [:]
            }
            return [
                "title": row["title"], "status": row["status"], "updated_by": row["updated_by"], "amount": (row["amount"] as Double?).map { "\($0)" },
            ]
        }
    }

    @Test(
        "a rewrite is applied with the stored record, which the device takes at once; another device pulls the same",
        arguments: StorageBackend.allCases
    )
    func rewrite(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let store = try Self.openStore("alice")
            let client = Self.client(store, server)
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, title, amount, updated_by) VALUES ('j1', 'Roof', 120, 'mallory')")
            }
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 1)
            #expect(try await Self.job("j1", in: store)["updated_by"] == "alice", "the server's data, taken from the answer")
            #expect(try await client.deadLetters().isEmpty)
            let other = try Self.openStore("alice-tablet")
            try await Self.client(other, server).sync()
            #expect(try await Self.job("j1", in: other)["updated_by"] == "alice")
            #expect(await client.status.pending == 0)
        }
    }

    @Test(
        "an edit made while a rewritten write was in flight builds on the rule's version: no conflict, nothing lost",
        arguments: StorageBackend.allCases
    )
    func editDuringRewrite(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let store = try Self.openStore("alice", detectsConflicts: true)
            let edited = LockIsolated(false)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                let first = edited.withValue { done in
                    defer { done = true }
                    return !done
                }
                if request.path.hasPrefix(Endpoint.push), first {
                    try await store.database.write { db in try db.execute(sql: "UPDATE jobs SET title = 'Roof, north side' WHERE id = 'j1'") }
                }
                return try await next(request)
            }
            let client = FerryClient(store: store, transport: transport, token: { try await TestServer.token(for: "alice") }, clock: ImmediateClock())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO jobs (id, title, amount) VALUES ('j1', 'Roof', 120)") }
            let first = try await client.sync()
            #expect(first.upload.conflicts == 0)
            let second = try await client.sync()
            #expect(second.upload.conflicts == 0, "the queued edit's base is the rule's version")
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records["jobs/j1"]?.data?["title"] == .string("Roof, north side"))
            #expect(records["jobs/j1"]?.data?["updated_by"] == .string("alice"))
        }
    }

    @Test("the same rule judges a write on the device before it is made, against the rows the store holds")
    func sameRuleOnTheDevice() async throws {
        let store = try Self.openStore("device")
        let rules: [any WriteRule] = [JobRules()]
        let negative = try await store.check(rules, entity: "jobs", entityID: "j1", data: ["amount": .integer(-2)], user: "alice")
        #expect(
            negative == .reject(code: "amount_not_positive", message: "The amount must be more than zero.", details: ["field": .string("amount")])
        )
        let closing: JSONObject = ["title": .string("Roof"), "status": .string("done"), "photo": .string("p1")]
        let withoutPhoto = try await store.check(rules, entity: "jobs", entityID: "j1", data: closing, user: "alice")
        guard case .reject(let refusal) = withoutPhoto else {
            Issue.record("closed without a photo: \(withoutPhoto)")
            return
        }
        #expect(refusal.code == "job_closed_without_photo")
        try await store.database.write { db in try db.execute(sql: "INSERT INTO photos (id, caption) VALUES ('p1', 'the new roof')") }
        var stored = closing
        stored["updated_by"] = .string("alice")
        #expect(try await store.check(rules, entity: "jobs", entityID: "j1", data: closing, user: "alice") == .rewrite(stored))
        #expect(try await store.check(rules, entity: "photos", entityID: "p2", data: [:], user: "alice") == .accept, "no rule judges photos")
        await #expect(throws: RuleUnavailable.self) {
            _ = try await store.check(rules, entity: "jobs", entityID: "j2", data: ["title": .string("later")], user: "alice")
        }
        try await store.close()
    }

    @Test(
        "a client that ignores the rewrite's current (one older than rules) gets the stored record by its next pull",
        arguments: StorageBackend.allCases
    )
    func olderClientPullsTheRewrite(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let transport = TolerantDecodingTests.rewriting(server, Endpoint.push) { object in
                guard var results = object["results"] as? [[String: Any]] else { return }
                for index in results.indices { results[index]["current"] = nil }
                object["results"] = results
            }
            let store = try Self.openStore("alice")
            let client = FerryClient(store: store, transport: transport, token: { try await TestServer.token(for: "alice") }, clock: ImmediateClock())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, title, amount, updated_by) VALUES ('j1', 'Roof', 120, 'mallory')")
            }
            try await client.sync()
            #expect(try await Self.job("j1", in: store)["updated_by"] == "alice", "the same sync's pull brought the rule's write")
            #expect(await client.status.pending == 0)
        }
    }

    @Test(
        "a refusal carries the app's code, message and details: the row shows the server's record, the change is a dead letter, fixed and sent again it goes",
        arguments: StorageBackend.allCases
    )
    func rejectFixResend(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let store = try Self.openStore("alice")
            let client = Self.client(store, server)
            try await store.database.write { db in try db.execute(sql: "INSERT INTO jobs (id, title, amount) VALUES ('j1', 'Roof', 120)") }
            try await client.sync()
            let rejections = client.rejections()
            try await store.database.write { db in
                try db.execute(sql: "UPDATE jobs SET amount = -5 WHERE id = 'j1'")
                try db.execute(sql: "INSERT INTO jobs (id, title, amount) VALUES ('j2', 'Gutter', 0)")
            }
            let report = try await client.sync()
            #expect(report.upload.deadLettered == 2)
            var seen: [Rejection] = []
            for await rejection in rejections {
                seen.append(rejection)
                if seen.count == 2 { break }
            }
            #expect(seen.map(\.entityID) == ["j1", "j2"])
            #expect(seen.allSatisfy { $0.code == "app.amount_not_positive" && $0.isByAppRule })
            #expect(seen.first?.message == "The amount must be more than zero.")
            #expect(seen.first?.details == ["field": .string("amount")])
            #expect(try await Self.job("j1", in: store)["amount"] == "120.0", "j1 shows the server's record again")
            #expect(try await Self.job("j2", in: store).isEmpty, "the server holds no j2")
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID).sorted() == ["j1", "j2"])
            #expect(dead.allSatisfy { $0.reason == "The amount must be more than zero." })

            // The person fixes the amount from the dead letter, and sends it again.
            #expect(try await client.retryDeadLetters() == 2)
            try await store.database.write { db in try db.execute(sql: "UPDATE jobs SET amount = 80") }
            let again = try await client.sync()
            #expect(again.upload.deadLettered == 0)
            #expect(try await client.deadLetters().isEmpty)
            let token = try await TestServer.token(for: "alice")
            let records = try await server.pullAll(token: token)
            #expect(records["jobs/j1"]?.data?["amount"]?.numberValue == 80)
            #expect(records["jobs/j2"]?.data?["updated_by"] == .string("alice"))
        }
    }

    @Test(
        "a rule reads another record in the push's transaction, as the batch leaves it: a photo sent in the same batch counts",
        arguments: StorageBackend.allCases
    )
    func readsAnotherRecord(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let store = try Self.openStore("alice")
            let client = Self.client(store, server)
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, title, amount, status, photo) VALUES ('j1', 'Roof', 120, 'done', 'p1')")
            }
            try await client.sync()
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["j1"])
            #expect(dead.first?.reason == "Take a photo of the finished job before closing it.")
            // The photo first, the job again after it, in one batch.
            try await client.discardDeadLetters()
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO photos (id, caption) VALUES ('p1', 'the new roof')")
                try db.execute(sql: "INSERT INTO jobs (id, title, amount, status, photo) VALUES ('j1', 'Roof', 120, 'done', 'p1')")
            }
            let report = try await client.sync()
            #expect(report.upload.deadLettered == 0)
            #expect(try await Self.job("j1", in: store)["status"] == "done")
            #expect(try await Self.job("j1", in: store)["updated_by"] == "alice")
        }
    }

    @Test(
        "a rule that fails refuses that write with rule_failed and the batch goes on; one that says not now applies nothing and is answered 503",
        arguments: StorageBackend.allCases
    )
    func failuresNeverWedgeTheQueue(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let store = try Self.openStore("alice")
            let client = Self.client(store, server)
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, title, amount) VALUES ('j1', 'boom', 1), ('j2', 'Roof', 2)")
            }
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 1 && report.upload.deadLettered == 1)
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entityID) == ["j1"])
            #expect(dead.first?.reason.contains("failed") == true)

            // Not now: the whole push is refused with 503 and Retry-After, and nothing of it is kept.
            let token = try await TestServer.token(for: "bob")
            let body = try JSONEncoder().encode(
                PushRequest(
                    clientID: "bobs-phone",
                    mutations: [
                        .upsert(id: 1, entity: "jobs", entityID: "k1", data: ["title": .string("Fence")]),
                        .upsert(id: 2, entity: "jobs", entityID: "k2", data: ["title": .string("later")]),
                    ]
                )
            )
            let reply = try await server.send(.POST, "/v1/push", token: token, body: body)
            #expect(reply.status == 503)
            #expect(reply.headers.first(name: "Retry-After") == "1")
            #expect(try await server.pullAll(token: token).isEmpty, "k1 was not applied either")
            // The same push again once the service is back is applied whole, under the same ids.
            let fixed = try await server.pushOK(
                PushRequest(clientID: "bobs-phone", mutations: [.upsert(id: 1, entity: "jobs", entityID: "k1", data: ["title": .string("Fence")])]),
                token: token
            )
            #expect(fixed.results.map(\.status) == [.applied])
        }
    }

    @Test(
        "a resent write is answered as the first time: a rewrite with the record as it is now, a refusal with the app's code and details",
        arguments: StorageBackend.allCases
    )
    func resendsAnsweredTheSame(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rules: Self.rules) { server in
            let token = try await TestServer.token(for: "carol")
            let request = PushRequest(
                clientID: "carols-phone",
                mutations: [
                    .upsert(id: 1, entity: "jobs", entityID: "j1", data: ["title": .string("Roof")]),
                    .upsert(id: 2, entity: "jobs", entityID: "j2", data: ["title": .string("Gutter"), "amount": .integer(-1)]),
                ]
            )
            let first = try await server.pushOK(request, token: token)
            let again = try await server.pushOK(request, token: token)
            for response in [first, again] {
                #expect(response.results.map(\.status) == [.applied, .rejected])
                #expect(response.results[0].current?.data?["updated_by"] == .string("carol"))
                #expect(response.results[1].code == "app.amount_not_positive")
                #expect(response.results[1].details == ["field": .string("amount")])
                #expect(response.results[1].current == .absent, "the record as the server holds it: none")
            }
            // A conflict is the client's policy's, before any rule: a stale edit the rule would
            // refuse is answered conflict, with the record.
            let stale = try await server.pushOK(
                PushRequest(
                    clientID: "carols-phone",
                    mutations: [Mutation(id: 3, entity: "jobs", entityID: "j1", op: .upsert, data: ["amount": .integer(-1)], baseVersion: 1)]
                ),
                token: token
            )
            #expect(stale.results.map(\.status) == [.conflict])
            #expect(stale.results[0].current?.version == 2, "the client's write at 1, the rule's at 2")
        }
    }
}
