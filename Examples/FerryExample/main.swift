// A complete app's sync, from the README: a synced table, a session that follows the signed-in
// user, a start-up pipeline, a status observer, 2,000 writes, a switch to another user and
// back, and sign-out. Run it against a server: scripts/run-example.sh starts one and runs this.
import Ferry
import Foundation

// 1. The app's own table, and which of its columns is a natural key (a HealthKit sample id):
//    a record the server already holds under that key is merged, not doubled.
var schema = DatabaseMigrator()
schema.registerMigration("v1") { db in
    try db.execute(
        sql: "CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, value INTEGER NOT NULL, sample_id TEXT)"
    )
}
let events = SyncedTable(table: "events", naturalKey: "sample_id")

// 2. One session for the app's whole life. It opens the signed-in user's store, runs their
//    scheduler, and asks for their token (kept until 30 s before its expiry, renewed once on a 401).
let environment = ProcessInfo.processInfo.environment
let server = URL(string: environment["FERRY_SERVER_URL"] ?? "http://127.0.0.1:8080")!
let storeDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-example-\(UUID())")
#if canImport(Network)
let connectivity = PathConnectivityMonitor()  // Apple platforms: the system's view of the network
#else
let connectivity = HealthProbeMonitor(transport: URLSessionTransport(baseURL: server))  // elsewhere: asks the server
#endif
var configuration = SessionConfiguration(storeDirectory: storeDirectory, tables: [events], schema: schema)
configuration.signOutPolicy = .eraseLocalData  // a shared device: a user's data leaves with them
let session = SyncSession(
    configuration: configuration,
    transport: URLSessionTransport(baseURL: server),
    token: { user in
        // Stands in for the app's auth service: tokens from `ferry token --user NAME`.
        guard let token = environment["FERRY_TOKEN_\(user.uppercased())"] else { throw URLError(.userAuthenticationRequired) }
        return token
    },
    connectivity: connectivity
)

// 3. Status for the UI, whoever is signed in. In SwiftUI (Apple platforms), one model for the
//    view's life: `@State var sync = SyncStatusModel(session: session)` and
//    `Text(sync.status.progressText)`. Anywhere, the same statuses as a stream:
let statusPrinter = Task {
    var last = ""
    for await status in session.statusUpdates() where status.progressText != last {
        last = status.progressText
        print("  status: \(last)")
    }
}

// 4. Start-up: sign-in blocks, the rest is optional; the initial sync joins the launch run.
let startup = StartupPipeline(steps: [
    .signedIn(session),
    .optional("Warm the cache", timeout: .seconds(5)) { context in await context.report("Loading the cache") },
    .initialSync(session, weight: 4),
])
try await session.signIn("alice")  // returns once Alice's store and scheduler run
let progress = await startup.run()  // returns when every step has run or been skipped
print("start-up: \(progress.phase), \(progress.outcomes.map { "\($0.0): \($0.1)" }.joined(separator: ", "))")

// 5. The app writes as if it were alone; every change is queued in the same transaction.
func recordSteps(_ count: Int, in store: FerryStore) async throws {
    try await store.database.write { db in
        for index in 0..<count {
            try db.execute(
                sql: "INSERT INTO events (id, kind, value, sample_id) VALUES (?, 'steps', ?, ?)",
                arguments: [UUID().uuidString, index, "hk:\(index)"]
            )
        }
    }
}
guard let store = await session.store else { fatalError("signed in above") }
try await recordSteps(2000, in: store)
print("written: \(await session.status.pending) changes waiting")  // counted the moment the write returns
try await session.sync()  // pull to refresh: returns when the run that serves it is done
let synced = await session.status
print("synced: \(synced.pending) waiting, \(synced.deadLettered) set aside")

// 6. Another user on the same device, then Alice again: each sees only their own data, and
//    Alice's 2,000 come back from the server (her local copy left with her at the switch).
func eventsOnThisDevice() async throws -> Int {
    guard let store = await session.store else { return 0 }  // nobody signed in
    return try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events") ?? 0 }
}
try await session.signIn("bob")  // Alice's work stops completely before Bob's starts
try await session.sync()
let bobs = try await eventsOnThisDevice()
try await session.signIn("alice")
try await session.sync()
let alices = try await eventsOnThisDevice()
print("bob has \(bobs) events, alice has \(alices)")

// 7. Sign-out: the run in progress stops cleanly, nothing is left in flight, and (with
//    `.eraseLocalData`) the store is deleted; `.keepPendingChanges`, the default, keeps it.
try await session.signOut()
await startup.reset()  // the next sign-in runs start-up from the top
statusPrinter.cancel()
await statusPrinter.value
try? FileManager.default.removeItem(at: storeDirectory)
guard progress.phase == .finished, synced.pending == 0, synced.deadLettered == 0, bobs == 0, alices == 2000 else {
    print("unexpected result")
    exit(1)
}
print("done")
