// The field-service company's app, against its own server (Examples/FieldService/Server): a
// dispatcher and a worker share a team's jobs; the server's rules refuse what the company does
// not allow, with the reason, and the app shows it. Run by scripts/run-example.sh.
import Ferry
import FerryRules
import FieldServiceRules
import Foundation

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
let tables = [SyncedTable(table: "jobs", space: .column("team_id")), SyncedTable(table: "photos", space: .column("team_id"))]
let environment = ProcessInfo.processInfo.environment
let server = URL(string: environment["FERRY_SERVER_URL"] ?? "http://127.0.0.1:8080")!
let folder = FileManager.default.temporaryDirectory.appendingPathComponent("field-service-\(UUID())")
try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)

@MainActor func device(_ user: String) throws -> FerryClient {
    let store = try FerryStore(path: folder.appendingPathComponent("\(user).sqlite").path, schema: schema, tables: tables)
    return FerryClient(store: store, transport: URLSessionTransport(baseURL: server)) {
        guard let token = environment["FERRY_TOKEN_\(user.uppercased())"] else { throw URLError(.userAuthenticationRequired) }
        return token
    }
}

func require(_ condition: Bool, _ what: String) {
    guard condition else {
        print("FAILED: \(what)")
        exit(1)
    }
}

func job(_ client: FerryClient, _ column: String) throws -> String? {
    try client.store.database.read { db in try String.fetchOne(db, sql: "SELECT \(column) FROM jobs WHERE id = 'j1'") }
}

// 1. The dispatcher makes the team and a job for the worker; the server sets `updated_by`.
let team = "team-\(UUID().uuidString.prefix(8).lowercased())"
let dispatcher = try device("dispatcher")
let worker = try device("worker")
try await dispatcher.createSpace(team)
try await dispatcher.setRole(.write, of: "worker", in: team)
try dispatcher.store.database.write { db in
    try db.execute(
        sql: "INSERT INTO jobs (id, team_id, title, assignee, amount, status, updated_by) VALUES ('j1', ?, 'Roof', 'worker', 120, 'open', 'x')",
        arguments: [team]
    )
}
try await dispatcher.sync()
require(try job(dispatcher, "updated_by") == "dispatcher", "the server sets updated_by")
print("1. the dispatcher's job is stored, updated_by set by the server")

// 2. The worker tries to hand the job to someone else: only a dispatcher may.
let rejections = worker.rejections()
try await worker.sync()
try worker.store.database.write { db in try db.execute(sql: "UPDATE jobs SET assignee = 'someone' WHERE id = 'j1'") }
try await worker.sync()
var refused: Rejection?
for await rejection in rejections {
    refused = rejection
    break
}
require(refused?.code == "app.reassign_needs_dispatcher", "a worker cannot reassign")
require(try job(worker, "assignee") == "worker", "the row shows the server's job again")
print("2. refused: \(refused?.message ?? "")")

// 3. Closing it without a photo: the same rule says no on the phone, before anything is sent.
try await worker.discardDeadLetters()
let closing: JSONObject = [
    "title": .string("Roof"), "assignee": .string("worker"), "amount": .integer(120), "status": .string("done"), "photo": .string("p1"),
]
let onThePhone = try await worker.store.check([JobRules()], entity: "jobs", entityID: "j1", data: closing, space: team, user: "worker")
guard case .reject(let why) = onThePhone else {
    print("FAILED: closing without a photo was allowed on the phone")
    exit(1)
}
print("3. on the phone, before sending: \(why.message)")

// 4. With the photo taken, the job closes; the customer gets one email (the server's mail log).
try worker.store.database.write { db in
    try db.execute(sql: "INSERT INTO photos (id, team_id, caption) VALUES ('p1', ?, 'the new roof')", arguments: [team])
    try db.execute(sql: "UPDATE jobs SET status = 'done', photo = 'p1' WHERE id = 'j1'")
}
let report = try await worker.sync()
require(report.upload.deadLettered == 0, "the job closes with its photo")
require(try job(worker, "updated_by") == "worker", "updated_by is the closer")
try await dispatcher.sync()
require(try job(dispatcher, "status") == "done", "the dispatcher sees the job done")
print("4. closed with its photo; the dispatcher sees it done")
print("done")
