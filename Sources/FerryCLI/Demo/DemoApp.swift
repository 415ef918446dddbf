import Ferry
import FerryProtocol
import FerryTesting
import Foundation
import GRDB

/// An app as its users have it: its own tables, a `SyncSession` following the signed-in
/// user, and a transport that counts what goes over the wire. Every scenario drives one.
struct DemoApp: Sendable {
    static let tables = [
        SyncedTable(table: "projects"), SyncedTable(table: "tasks"), SyncedTable(table: "calendar_events"),
        SyncedTable(table: "health_events", naturalKey: "sample_id"),
    ]

    static func schema() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, title TEXT);
                    CREATE TABLE tasks (id TEXT PRIMARY KEY NOT NULL, title TEXT);
                    CREATE TABLE calendar_events (id TEXT PRIMARY KEY NOT NULL, title TEXT);
                    CREATE TABLE health_events (id TEXT PRIMARY KEY NOT NULL, kind TEXT, value INTEGER, sample_id TEXT);
                    """
            )
        }
        return migrator
    }

    let session: SyncSession
    /// Every request the app made, by path and by status.
    let wire: CountingTransport
    let directory: URL

    /// `network` sits between the counter and the real transport (faults, a gate).
    init(
        directory: URL,
        server: FerryTestServer,
        signOutPolicy: SignOutPolicy = .keepPendingChanges,
        connectivity: (any ConnectivityMonitor)? = nil,
        sync: SyncConfiguration = SyncConfiguration(),
        network: (any SyncTransport) -> any SyncTransport = { $0 }
    ) {
        var configuration = SessionConfiguration(storeDirectory: directory, tables: Self.tables, schema: Self.schema())
        configuration.signOutPolicy = signOutPolicy
        configuration.sync = sync
        // The five failures of DESIGN.md are told by the app's own triggers, counted one by one;
        // live changes are the team scenario's (its tablet keeps the event stream open).
        configuration.liveUpdates = false
        let wire = CountingTransport(network(URLSessionTransport(baseURL: server.baseURL)))
        self.wire = wire
        self.directory = directory
        self.session = SyncSession(
            configuration: configuration,
            transport: wire,
            token: { user in try await server.token(for: user) },
            connectivity: connectivity,
            clock: ContinuousClock()
        )
    }

    /// The signed-in user's engine, or a clear failure.
    func engine() async throws -> SyncSession.Engine {
        guard let engine = await session.engine else { throw CommandFailure("nobody is signed in") }
        return engine
    }

    /// Writes `count` health events the way an app does: plain inserts, captured into the outbox.
    func recordHealthEvents(_ count: Int, prefix: String, naturalKey: @escaping @Sendable (Int) -> String) async throws {
        try await engine().store.database.write { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO health_events (id, kind, value, sample_id) VALUES (?, 'steps', ?, ?)")
            for index in 0..<count {
                try insert.execute(arguments: ["\(prefix)-\(index)", index, naturalKey(index)])
            }
        }
    }

    /// Entries waiting in the signed-in user's outbox, read from the file itself.
    func pendingInStore() async throws -> Int {
        try await engine().store.database.read { db in try OutboxTable.pendingCount(db) }
    }

    /// The user's journal since `since`, oldest first.
    func journal(since: Date) async throws -> [JournalEvent] {
        try await engine().client.journal.events().filter { $0.at >= since }
    }
}

/// Reports a fixed state: the demo's network, switched by the scenario.
final class DemoLink: ConnectivityMonitor, @unchecked Sendable {
    // @unchecked: `online` and `continuations` are only touched under `lock`.
    private let lock = NSLock()
    private var online: Bool
    private var continuations: [AsyncStream<Bool>.Continuation] = []

    init(online: Bool) { self.online = online }

    func states() -> AsyncStream<Bool> {
        let (stream, continuation) = AsyncStream.makeStream(of: Bool.self)
        lock.withLock {
            continuation.yield(online)
            continuations.append(continuation)
        }
        return stream
    }

    func set(online: Bool) {
        lock.withLock {
            self.online = online
            for continuation in continuations { continuation.yield(online) }
        }
    }
}
