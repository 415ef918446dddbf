import Foundation
import GRDB

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The right to sync a store, held by one client at a time across every process that opens
/// the file (an app and its extensions share one App Group store).
///
/// The lease is a row in the store with its holder's process id and an expiry. A client
/// takes it when it is free, expired, or held by a process that no longer exists; taking it
/// returns every in-flight entry to pending, since whoever sent them is gone and resending
/// is safe (the server answers a resent mutation with its first result). While it syncs, the
/// holder confirms the lease in every transaction that changes the outbox or applies a pull
/// page, so a holder that lost it (suspended past its expiry) cannot apply a stale answer: its
/// run stops with ``FerryError/leaseLost(_:)`` and the new holder resends its batch.
package struct SyncLease: Sendable {
    let store: FerryStore
    /// Names this holder: process id and a random suffix, one per client.
    let holder: String
    /// How long the lease lasts without being confirmed.
    let duration: TimeInterval

    init(store: FerryStore, duration: TimeInterval) {
        self.store = store
        self.duration = duration
        self.holder = "pid \(ProcessInfo.processInfo.processIdentifier) client \(UUID().uuidString.prefix(8).lowercased())"
    }

    /// The lease as the store holds it; `nil` when nobody took it (or the store is older than leases).
    static func held(_ db: Database) throws -> (holder: String, processID: Int32, expiresAt: Date)? {
        guard try db.tableExists("ferry_lease") else { return nil }
        return try Row.fetchOne(db, sql: "SELECT holder, pid, expires_at FROM ferry_lease WHERE id = 1").map {
            ($0[0], $0[1], Date(timeIntervalSince1970: $0[2]))
        }
    }

    /// Names `processID` as the holder's process: `ferry demo` plays a crash by naming one that
    /// has ended.
    package static func setHolderProcess(_ processID: Int32, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [processID])
    }

    /// Takes the lease; returns `nil` on success, else who holds it.
    func acquire() async throws -> String? {
        try await store.database.write { db in
            let now = Date().timeIntervalSince1970
            if let row = try Row.fetchOne(db, sql: "SELECT holder, pid, expires_at FROM ferry_lease WHERE id = 1") {
                let current: String = row[0]
                let pid: Int32 = row[1]
                let expiresAt: Double = row[2]
                if current != holder, expiresAt > now, Self.processExists(pid) { return current }
            }
            try db.execute(
                sql: "INSERT OR REPLACE INTO ferry_lease (id, holder, pid, expires_at) VALUES (1, ?, ?, ?)",
                arguments: [holder, ProcessInfo.processInfo.processIdentifier, now + duration]
            )
            try OutboxTable.releaseAll(db)
            return nil
        }
    }

    /// Inside a transaction: fails unless this client still holds the lease, and extends it.
    func confirm(_ db: Database) throws {
        try db.execute(
            sql: "UPDATE ferry_lease SET expires_at = ? WHERE id = 1 AND holder = ?",
            arguments: [Date().timeIntervalSince1970 + duration, holder]
        )
        guard db.changesCount == 1 else {
            throw FerryError.leaseLost("another client took over this store's sync; its batches are resent by that client")
        }
    }

    /// Gives the lease up, if this client still holds it.
    func release() async throws {
        try await store.database.write { db in
            try db.execute(sql: "DELETE FROM ferry_lease WHERE id = 1 AND holder = ?", arguments: [holder])
        }
    }

    /// Whether a process with this id runs on this machine. `EPERM` means it exists but
    /// belongs to someone else (a sandboxed extension): it counts as alive.
    static func processExists(_ pid: Int32) -> Bool {
        guard pid > 0 else { return false }
        return kill(pid, 0) == 0 || errno == EPERM
    }
}
