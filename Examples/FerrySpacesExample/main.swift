// A team app's shared data, from the DocC article "Sharing data with spaces": a company's
// read-only reference data written by its backend, a team's projects shared by two phones,
// and a member removed. Run it against a server: scripts/run-example.sh starts one and runs this.
import Ferry
import Foundation

// 1. Where each table's rows live: a team's projects in the space their `team_id` names, the
//    company's address aliases in the space "company", the user's notes in their own space.
var schema = DatabaseMigrator()
schema.registerMigration("v1") { db in
    try db.execute(
        sql: """
            CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, title TEXT, status TEXT);
            CREATE TABLE aliases (id TEXT PRIMARY KEY NOT NULL, street TEXT);
            CREATE TABLE notes (id TEXT PRIMARY KEY NOT NULL, body TEXT);
            """
    )
}
let tables = [
    SyncedTable(table: "projects", space: .column("team_id")),
    SyncedTable(table: "aliases", space: .named("company")),
    SyncedTable(table: "notes"),
]

let environment = ProcessInfo.processInfo.environment
let server = URL(string: environment["FERRY_SERVER_URL"] ?? "http://127.0.0.1:8080")!
let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-spaces-example-\(UUID())")
try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)

/// A device of `user`: its store and a client (an app would hold a `SyncSession`; see the first example).
@MainActor func device(_ user: String) throws -> FerryClient {
    let store = try FerryStore(path: folder.appendingPathComponent("\(user).sqlite").path, schema: schema, tables: tables)
    return FerryClient(store: store, transport: URLSessionTransport(baseURL: server)) {
        // Stands in for the app's auth service: tokens from `ferry token --user NAME` (`--admin` for the backend).
        guard let token = environment["FERRY_TOKEN_\(user.uppercased())"] else { throw URLError(.userAuthenticationRequired) }
        return token
    }
}

// 2. The company's backend (a service token) creates the read-only space and fills it through
//    the library, like any writer: its rows name the space, and the server lets a service write it.
let backend = try device("backend")
try await backend.createSpace("company")
for user in ["alice", "bob"] { try await backend.setRole(.read, of: user, in: "company") }
try backend.store.database.write { db in
    for index in 1...200 {
        try db.execute(sql: "INSERT INTO aliases (id, street) VALUES (?, ?)", arguments: ["a-\(index)", "\(index) Harbour Road"])
    }
}
try await backend.sync()

// 3. Alice makes a team and adds Bob; a project she writes in it reaches his phone.
let team = "team-\(UUID().uuidString.prefix(8).lowercased())"
let alice = try device("alice")
let bob = try device("bob")
try await alice.createSpace(team)
try await alice.setRole(.write, of: "bob", in: team)
try alice.store.database.write { db in
    try db.execute(sql: "INSERT INTO projects (id, team_id, title, status) VALUES ('roof', ?, 'Roof', 'open')", arguments: [team])
}
try await alice.sync()
try await bob.sync()
let bobsAliases = try bob.store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM aliases") ?? 0 }
print("bob: \(bobsAliases) aliases, member of \((await bob.status.spaces).map { "\($0.space) (\($0.role.rawValue))" })")

// 4. Bob edits the shared project; Alice gets it. A write to the read-only space fails at once.
try bob.store.database.write { db in try db.execute(sql: "UPDATE projects SET status = 'done' WHERE id = 'roof'") }
try await bob.sync()
try await alice.sync()
let status = try alice.store.database.read { db in try String.fetchOne(db, sql: "SELECT status FROM projects WHERE id = 'roof'") }
print("alice sees the roof: \(status ?? "-")")
do {
    try bob.store.database.write { db in try db.execute(sql: "DELETE FROM aliases WHERE id = 'a-1'") }
} catch {
    print("bob cannot change the company's aliases: \(error)")
}

// 5. Alice removes Bob: his next sync drops the team's rows; what he had queued for the team
//    becomes a dead letter with the reason; his own notes and the aliases stay.
try bob.store.database.write { db in
    try db.execute(sql: "UPDATE projects SET title = 'Roof, north' WHERE id = 'roof'")
    try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n1', 'ladder in the van')")
}
try await alice.removeMember("bob", from: team)
try await bob.sync()
let (projects, notes) = try bob.store.database.read { db in
    (try Int.fetchOne(db, sql: "SELECT count(*) FROM projects") ?? 0, try Int.fetchOne(db, sql: "SELECT count(*) FROM notes") ?? 0)
}
let deadLetters = try await bob.deadLetters()
print("bob after removal: \(projects) projects, \(notes) note, dead letters: \(deadLetters.map(\.reason))")

try? FileManager.default.removeItem(at: folder)
guard bobsAliases == 200, status == "done", projects == 0, notes == 1, deadLetters.count == 1 else {
    print("unexpected result")
    exit(1)
}
print("done")
