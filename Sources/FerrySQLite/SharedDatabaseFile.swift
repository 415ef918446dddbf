import Foundation
import GRDB

/// Opening and migrating one SQLite file that other processes may open at the same moment:
/// two `ferry serve` on one database, an app and its extension on one store.
extension DatabasePool {
    /// Opens the pool at `path`, waiting for another process that is creating the same file.
    /// SQLite does not wait on a busy lock to switch a file to WAL (the pool's first statement):
    /// the second of two processes that create a file at once is answered "database is locked"
    /// at once. The switch is kept in the file, so the next try, after the first process's,
    /// needs no lock. Tries again for up to `patience`, the busy timeout of every other step.
    package static func openShared(path: String, configuration: Configuration, patience: Duration = .seconds(10)) throws -> DatabasePool {
        let deadline = ContinuousClock.now + patience
        while true {
            do {
                return try DatabasePool(path: path, configuration: configuration)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
    }
}

extension DatabaseMigrator {
    /// Applies missing migrations while other processes may be applying them too. GRDB's
    /// migrator reads which are applied before it takes the write lock, so two processes may
    /// both start the same one: the second fails on what the first created, and finds the
    /// migration applied on its next pass.
    package func migrateShared(_ writer: any DatabaseWriter) throws {
        while true {
            let before = try writer.read { db in try appliedIdentifiers(db) }
            do {
                return try migrate(writer)
            } catch {
                let after = try writer.read { db in try appliedIdentifiers(db) }
                // Another process made progress: try again. No progress means the error is ours.
                guard after.isStrictSuperset(of: before) else { throw error }
            }
        }
    }
}
