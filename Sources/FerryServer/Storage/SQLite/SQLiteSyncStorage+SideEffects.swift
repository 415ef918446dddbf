import FerryProtocol
import Foundation
import GRDB

/// The side effects the app's rules asked for (`side_effects`), on SQLite: each claim is a
/// write transaction, which SQLite runs one at a time across every process on the file.
extension SQLiteSyncStorage {
    /// Hands out what is due (``SyncStorage/claimSideEffects(limit:now:lease:)``).
    public func claimSideEffects(limit: Int, now: Int64, lease: Int64) async throws -> [DeliverableEffect] {
        try await mapErrors {
            try await writer.write { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        UPDATE side_effects SET claimed_until = ?, attempts = attempts + 1
                        WHERE key IN (
                            SELECT key FROM side_effects
                            WHERE delivered_at IS NULL AND due_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
                            ORDER BY due_at, key LIMIT ?
                        )
                        RETURNING key, kind, payload, attempts
                        """,
                    arguments: [now + lease, now, now, limit]
                )
                .map { row in
                    DeliverableEffect(key: row[0], kind: row[1], payload: try Self.payload(row[2]), attempt: row[3])
                }
                .sorted { $0.key < $1.key }
            }
        }
    }

    /// Marks the effect delivered (``SyncStorage/sideEffectDelivered(_:at:)``).
    public func sideEffectDelivered(_ key: String, at now: Int64) async throws {
        try await mapErrors {
            try await writer.write { db in
                try db.execute(
                    sql: "UPDATE side_effects SET delivered_at = ?, claimed_until = NULL, last_error = NULL WHERE key = ?",
                    arguments: [now, key]
                )
            }
        }
    }

    /// Sets the effect's next attempt (``SyncStorage/sideEffectFailed(_:error:retryAt:)``).
    public func sideEffectFailed(_ key: String, error: String, retryAt: Int64) async throws {
        try await mapErrors {
            try await writer.write { db in
                try db.execute(
                    sql: "UPDATE side_effects SET claimed_until = NULL, due_at = ?, last_error = ? WHERE key = ? AND delivered_at IS NULL",
                    arguments: [retryAt, String(error.prefix(1000)), key]
                )
            }
        }
    }

    /// Counts what waits for delivery (``SyncStorage/pendingSideEffects()``).
    public func pendingSideEffects() async throws -> Int {
        try await mapErrors {
            try await writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM side_effects WHERE delivered_at IS NULL") ?? 0 }
        }
    }

    /// Writes a push's side effects in its transaction; a key written already is left as it is.
    static func write(_ effects: [PendingEffect], db: Database) throws {
        guard !effects.isEmpty else { return }
        let now = serverMilliseconds()
        let statement = try db.cachedStatement(
            sql: "INSERT INTO side_effects (key, kind, payload, created_at, due_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
        )
        for effect in effects { try statement.execute(arguments: [effect.key, effect.kind, effect.payload, now, now]) }
    }

    /// A stored payload as the handler gets it.
    static func payload(_ data: Data) throws -> JSONObject {
        guard case .object(let object) = try? JSONReader.parse(data) else {
            throw StorageError.corrupt("a side effect's payload is not a JSON object")
        }
        return object
    }
}
