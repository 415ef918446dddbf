import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// The field-service company's own server (Examples/FieldService/Server), built on FerryServer
/// with its rules, run as two real processes on one database behind a client that sends each
/// request to the next process, as a load balancer would: every decision reaches a real client,
/// and each email goes once through a `kill -9` between the commit and the delivery.
@Suite("The app's rules across server processes", .timeLimit(.minutes(4)))
struct RulesAcrossProcessesTests {
    static let schema: DatabaseMigrator = {
        var schema = DatabaseMigrator()
        schema.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, title TEXT, assignee TEXT, amount REAL, status TEXT,
                        photo TEXT, updated_by TEXT);
                    CREATE TABLE photos (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, caption TEXT);
                    """
            )
        }
        return schema
    }()

    /// `count` field-service servers on `database`, each logging its emails to `mailLog`; with
    /// `mailDown`, every delivery fails and waits to be tried again.
    static func serve(
        _ count: Int,
        on database: TestDatabase,
        mailLog: URL,
        mailDown: Bool,
        in directory: URL
    ) async throws
        -> [FerryProcess]
    {
        let arguments = ["--database", database.url.description, "--mail-log", mailLog.path, "--port", "0"]
        let environment = [
            "FERRY_JWT_SECRET": TestServer.secret, "FIELD_SERVICE_MAIL_DOWN": mailDown ? "1" : "0",
            // Killed while holding an email, a process gives it to the next within seconds.
            "FIELD_SERVICE_EFFECT_LEASE_SECONDS": "2",
        ]
        return try (0..<count).map { _ in
            try FerryProcess(arguments, in: directory, executable: "FieldServiceServer", environment: environment)
        }
    }

    /// `user`'s device, whose requests go to each process in turn.
    static func device(_ user: String, _ processes: [FerryProcess], in directory: URL) async throws -> FerryClient {
        var transports: [URLSessionTransport] = []
        for process in processes {
            let port = try await process.listeningPort(announcement: "Field service server listening on http://")
            transports.append(URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!))
        }
        let turn = LockIsolated(0)
        let transport = InterceptingTransport(transports[0]) { [transports] request, _ in
            let next = turn.withValue { turn in
                defer { turn += 1 }
                return turn % transports.count
            }
            return try await transports[next].send(request)
        }
        let store = try FerryStore(
            path: directory.appendingPathComponent("\(user).sqlite").path,
            schema: schema,
            tables: [SyncedTable(table: "jobs", space: .column("team_id")), SyncedTable(table: "photos", space: .column("team_id"))]
        )
        return FerryClient(store: store, transport: transport, token: { try await TestServer.token(for: user) })
    }

    static func jobs(_ client: FerryClient) async throws -> [String: Row] {
        try client.store.database.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT * FROM jobs").map { ($0["id"] as String, $0) })
        }
    }

    /// The emails the processes sent: one line each, `key kind job`.
    static func emails(_ mailLog: URL) -> [String] {
        ((try? String(contentsOf: mailLog, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test(
        "two processes of the company's server: accept, rewrite, refusals with the app's codes, a fix from the dead letter, a rule reading the photo in the push's transaction; each email once after both are killed between commit and delivery",
        arguments: StorageBackend.allCases
    )
    func decisionsAndEmails(backend: StorageBackend) async throws {
        let directory = TestDirectory.make("rules-processes")
        let database = try await TestDatabase.make(backend)
        let mailLog = directory.appendingPathComponent("mail.log")
        var processes = try await Self.serve(2, on: database, mailLog: mailLog, mailDown: true, in: directory)
        defer { for process in processes { process.process.terminate() } }
        let dispatcher = try await Self.device("dispatcher", processes, in: directory)
        let worker = try await Self.device("worker", processes, in: directory)

        // Accepted, and rewritten: the server sets `updated_by`, and the device takes it at once.
        try await dispatcher.createSpace("team")
        try await dispatcher.setRole(.write, of: "worker", in: "team")
        try await dispatcher.store.database.write { db in
            for job in ["j1", "j2", "j3", "j4"] {
                try db.execute(
                    sql:
                        "INSERT INTO jobs (id, team_id, title, assignee, amount, status, updated_by) VALUES (?, 'team', 'Roof', 'worker', 120, 'open', 'x')",
                    arguments: [job]
                )
            }
        }
        #expect(try await dispatcher.sync().upload.acknowledged == 4)
        #expect(try await Self.jobs(dispatcher).values.map { $0["updated_by"] as String? } == Array(repeating: "dispatcher", count: 4))

        // Refused with the app's code and details; the row shows the server's job again.
        let rejections = worker.rejections()
        try await worker.sync()
        try await worker.store.database.write { db in
            try db.execute(sql: "UPDATE jobs SET amount = -5 WHERE id = 'j1'")
            try db.execute(sql: "UPDATE jobs SET assignee = 'someone' WHERE id = 'j2'")
        }
        #expect(try await worker.sync().upload.deadLettered == 2)
        var refused: [String: Rejection] = [:]
        for await rejection in rejections {
            refused[rejection.entityID] = rejection
            if refused.count == 2 { break }
        }
        #expect(refused["j1"]?.code == "app.amount_not_positive" && refused["j1"]?.details?["field"] == .string("amount"))
        #expect(refused["j2"]?.code == "app.reassign_needs_dispatcher" && refused["j2"]?.message == "Only a dispatcher may reassign a job.")
        let shown = try await Self.jobs(worker)
        #expect(shown["j1"]?["amount"] as Double? == 120 && shown["j2"]?["assignee"] as String? == "worker")
        #expect(try await worker.deadLetters().map(\.entityID).sorted() == ["j1", "j2"])

        // Fixed from its dead letter and sent again.
        try await worker.store.database.write { db in try db.execute(sql: "UPDATE jobs SET amount = 80 WHERE id = 'j1'") }
        #expect(try await worker.sync().upload.acknowledged == 1)
        try await worker.discardDeadLetters()

        // Closing needs the photo, which the rule reads in the push's own transaction: the photos
        // of j1 to j3 go in the same push as the jobs; j4 names none.
        try await worker.store.database.write { db in
            for job in ["j1", "j2", "j3"] {
                try db.execute(sql: "INSERT INTO photos (id, team_id, caption) VALUES (?, 'team', 'done')", arguments: ["p-\(job)"])
                try db.execute(sql: "UPDATE jobs SET status = 'done', photo = ? WHERE id = ?", arguments: ["p-\(job)", job])
            }
            try db.execute(sql: "UPDATE jobs SET status = 'done' WHERE id = 'j4'")
        }
        let closing = try await worker.sync()
        #expect(closing.upload.deadLettered == 1)
        let closed = try await Self.jobs(worker)
        #expect(["j1", "j2", "j3"].allSatisfy { closed[$0]?["status"] as String? == "done" && closed[$0]?["updated_by"] as String? == "worker" })
        #expect(closed["j4"]?["status"] as String? == "open")
        #expect(try await worker.deadLetters().map(\.entityID) == ["j4"])

        // The mail service is down: each process tries and fails; both are killed mid-retry.
        while !processes.contains(where: { $0.text.contains("a side effect failed") }) { try await Task.sleep(for: .milliseconds(50)) }
        for process in processes { await process.killHard() }
        #expect(Self.emails(mailLog).isEmpty)
        let storage = try await database.open()
        #expect(try await storage.pendingSideEffects() == 3, "asked for in the commits, not delivered")
        try await storage.close()

        // Two new processes, the mail service back: each job's email goes once between them.
        processes = try await Self.serve(2, on: database, mailLog: mailLog, mailDown: false, in: directory)
        for process in processes { _ = try await process.listeningPort(announcement: "Field service server listening on http://") }
        while Self.emails(mailLog).count < 3 { try await Task.sleep(for: .milliseconds(50)) }
        let reopened = try await database.open()
        while try await reopened.pendingSideEffects() > 0 { try await Task.sleep(for: .milliseconds(50)) }
        try await reopened.close()
        let sent = Self.emails(mailLog).map { $0.split(separator: " ").map(String.init) }
        #expect(sent.count == 3, "\(sent)")
        let jobs: [String] = sent.compactMap(\.last).sorted()
        let keys = Set(sent.compactMap(\.first))
        #expect(jobs == ["j1", "j2", "j3"])
        #expect(keys.count == 3, "one key each")
    }
}
