import FerryProtocol
import FerrySQLite
import Foundation
import GRDB

/// One user's local database: the app's synced tables plus Ferry's outbox,
/// record versions, sync position and journal, in one SQLite file (WAL).
///
/// The app writes through `database` as usual; triggers installed here
/// capture each change of a synced table into the outbox in the same
/// transaction, so a write and its outbox entry commit or vanish together.
public final class FerryStore: Sendable {
    /// The app's handle on its data. Writes to synced tables are captured automatically.
    public let database: DatabasePool
    /// This installation's client id. It changes only when the store finds that another store
    /// holds it too (a copy on another device, or a backup restored here): the server then
    /// knows ids this store never sent, and the store takes a new one (`Outbox.apply`).
    public var clientID: String { identity.clientID }
    /// The client id as this process last read or changed it.
    let identity: ClientIdentity
    /// The synced tables, each with its change capture installed.
    public let tables: [SyncedTable]
    /// The store's file.
    public let path: String
    /// This process's commits to the store, counted, and told to who listens for queued changes.
    let commits = StoreCommits()

    /// Opens or creates the store at `path`.
    ///
    /// The app's migrations (`schema`) run with change capture off: the capture triggers come
    /// down before the first pending migration and go up again, matching the tables' new
    /// columns, after the last. A migration may therefore drop or rename columns of a synced
    /// table, and its own writes are not uploaded; to upload rows a migration changed, it
    /// calls ``FerryStore/queueUpload(of:where:arguments:in:)``.
    ///
    /// - Parameters:
    ///   - path: the store's file, created if it does not exist; its folder must exist.
    ///   - schema: the app's own migrations, run before the synced tables are checked.
    ///   - tables: the tables to sync; each must exist with a TEXT primary key column.
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store (nothing in
    ///   it is changed), ``FerryError/invalidTable(_:)`` for a table that does not fit, and the
    ///   app's migrations' own errors.
    public init(path: String, schema: DatabaseMigrator? = nil, tables: [SyncedTable]) throws {
        var configuration = Configuration()
        configuration.label = "ferry.store"
        configuration.busyMode = .timeout(10)
        do {
            if FileManager.default.fileExists(atPath: path) {
                // Looked at read-only first: opening a pool writes to the file (GRDB makes
                // sure the write-ahead log is not empty), and a file that is not ours stays as it is.
                var readOnly = Configuration()
                readOnly.readonly = true
                // Another process (an app's extension) may be opening or migrating it.
                readOnly.busyMode = .timeout(10)
                let probe = try DatabaseQueue(path: path, configuration: readOnly)
                try probe.read { db in try Self.checkReadable(db, path: path) }
                try probe.close()
            }
            database = try DatabasePool.openShared(path: path, configuration: configuration)
            try StoreSchema.migrator.migrateShared(database)
        } catch let error as DatabaseError {
            throw FerryError.unreadableStore("\(path): \(error.message ?? "\(error.resultCode)"); nothing in it was changed", underlying: error)
        }
        self.tables = tables
        self.path = path
        if let schema, try !database.read(schema.hasCompletedMigrations) {
            // The app's migrations write with capture off. Asked again in the transaction that
            // drops the triggers: another process (an app's extension) may have migrated and
            // installed capture since, and be writing through it.
            try database.write { db in
                if try !schema.hasCompletedMigrations(db) { try ChangeCapture.uninstallAll(db) }
            }
            // An app and its extension at first launch may both run the app's migrations.
            try schema.migrateShared(database)
        }
        identity = ClientIdentity(
            try database.write { db in
                guard let clientID = try StoreMeta.clientID(db) else {
                    throw FerryError.unreadableStore("\(path): the store holds no client id; the file is damaged")
                }
                for table in tables {
                    try ChangeCapture.install(for: table, in: db)
                    try ExtraFields.fold(into: table, db: db)
                }
                return clientID
            }
        )
        database.add(transactionObserver: commits)
    }

    /// Refuses, before anything is written, a file whose migrations say it is a Ferry store
    /// but that lacks what Ferry keeps in it.
    private static func checkReadable(_ db: Database, path: String) throws {
        guard try StoreSchema.isMigrated(db) else { return }
        guard try StoreSchema.holdsTables(db), try StoreMeta.clientID(db) != nil else {
            throw FerryError.unreadableStore("\(path): Ferry's tables are missing or empty; the file is damaged, nothing in it was changed")
        }
    }

    /// Queues an upload of the current state of `table`'s rows matching `condition` (all rows
    /// without one), as if each had just been written. For an app migration whose writes
    /// should reach the server: migrations run with change capture off.
    public static func queueUpload(of table: SyncedTable, where condition: String? = nil, arguments: StatementArguments = [], in db: Database) throws
    {
        try ChangeCapture.queueUpserts(of: table, where: condition, arguments: arguments, in: db)
    }

    /// Records a change that is not a row of a synced table; it is uploaded like any other.
    /// `space` names the space the record lives in (`nil`: the personal space); a space the
    /// store knows it may only read is refused with ``FerryError/readOnlySpace(_:)``.
    public func enqueue(
        entity: String,
        entityID: String,
        op: MutationOp,
        data: JSONObject? = nil,
        naturalKey: String? = nil,
        space: String? = nil
    ) async throws {
        let text = try data.map { String(decoding: try ProtocolValidation.encode($0), as: UTF8.self) }
        try await database.write { db in
            if let space, try SpaceMemberships.role(in: space, db: db) == .read {
                throw FerryError.readOnlySpace(SpaceGuard.message(space: space, role: SpaceRole.read.rawValue))
            }
            try OutboxTable.insert(
                entity: entity,
                entityID: entityID,
                op: op,
                data: text,
                naturalKey: naturalKey,
                space: space,
                spaceIncarnation: try space.flatMap { try SpaceMemberships.lastIncarnation(of: $0, db: db) },
                db: db
            )
        }
    }

    /// The table that holds `entity`'s records: its own, else a multi-entity table.
    func table(forEntity entity: String) -> SyncedTable? {
        tables.first { $0.entityColumn == nil && $0.entity == entity } ?? tables.first { $0.entityColumn != nil }
    }

    /// Runs `body` with change capture off, for writes that come from the server.
    static func withoutCapture<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try StoreMeta.setCapturing(false, db: db)
        defer { try? StoreMeta.setCapturing(true, db: db) }
        return try body()
    }

    /// Closes the database once the reads and writes in progress have finished; the store
    /// cannot be used afterwards.
    ///
    /// GRDB's `close()` blocks until those reads finish, and they may need a Swift concurrency
    /// thread to do so; it therefore waits on a dispatch queue of its own, never on one of
    /// the few cooperative threads (two on a 2-core machine).
    public func close() async throws {
        let database = self.database
        try await offCooperativeThreads("ferry.store.close") { try database.close() }
    }

    /// Reads the store file at `path` without changing a byte of it (no migration, no
    /// trigger, nothing created), for tools that look at a store an app may have open.
    ///
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store or cannot be read.
    static func readFile<T>(atPath path: String, _ read: (Database) throws -> T) throws -> T {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(10)
        do {
            let file = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? file.close() }
            return try file.read { db in
                guard try StoreSchema.isMigrated(db), try StoreSchema.holdsTables(db) else {
                    throw FerryError.unreadableStore("\(path): not a Ferry store; nothing in it was changed")
                }
                return try read(db)
            }
        } catch let error as DatabaseError {
            throw FerryError.unreadableStore("\(path): \(error.message ?? "\(error.resultCode)"); nothing in it was changed", underlying: error)
        }
    }
}
