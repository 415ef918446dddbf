import FerryProtocol
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The side effects the app's rules asked for (`side_effects`), on PostgreSQL: several
/// processes hand them out from one table, each row to one of them (`FOR UPDATE SKIP LOCKED`).
extension PostgresSyncStorage {
    /// Hands out what is due (``SyncStorage/claimSideEffects(limit:now:lease:)``).
    public func claimSideEffects(limit: Int, now: Int64, lease: Int64) async throws -> [DeliverableEffect] {
        try await withDatabase { [logger] db in
            var claimed: [DeliverableEffect] = []
            let rows = try await db.query(
                """
                UPDATE side_effects SET claimed_until = \(now + lease), attempts = attempts + 1
                WHERE key IN (
                    SELECT key FROM side_effects
                    WHERE delivered_at IS NULL AND due_at <= \(now) AND (claimed_until IS NULL OR claimed_until <= \(now))
                    ORDER BY due_at, key LIMIT \(limit) FOR UPDATE SKIP LOCKED
                )
                RETURNING key, kind, payload, attempts
                """,
                logger: logger
            )
            for try await (key, kind, payload, attempts) in rows.decode((String, String, ByteBuffer, Int32).self) {
                claimed.append(
                    DeliverableEffect(
                        key: key,
                        kind: kind,
                        payload: try SQLiteSyncStorage.payload(Data(payload.readableBytesView)),
                        attempt: Int(attempts)
                    )
                )
            }
            return claimed.sorted { $0.key < $1.key }
        }
    }

    /// Marks the effect delivered (``SyncStorage/sideEffectDelivered(_:at:)``).
    public func sideEffectDelivered(_ key: String, at now: Int64) async throws {
        _ = try await withDatabase { [logger] db in
            try await db.query(
                "UPDATE side_effects SET delivered_at = \(now), claimed_until = NULL, last_error = NULL WHERE key = \(key)",
                logger: logger
            )
        }
    }

    /// Sets the effect's next attempt (``SyncStorage/sideEffectFailed(_:error:retryAt:)``).
    public func sideEffectFailed(_ key: String, error: String, retryAt: Int64) async throws {
        _ = try await withDatabase { [logger] db in
            try await db.query(
                """
                UPDATE side_effects SET claimed_until = NULL, due_at = \(retryAt), last_error = \(String(error.prefix(1000)))
                WHERE key = \(key) AND delivered_at IS NULL
                """,
                logger: logger
            )
        }
    }

    /// Counts what waits for delivery (``SyncStorage/pendingSideEffects()``).
    public func pendingSideEffects() async throws -> Int {
        try await withDatabase { [logger] db in
            for try await count in try await db.query("SELECT count(*) FROM side_effects WHERE delivered_at IS NULL", logger: logger)
                .decode(Int64.self)
            {
                return Int(count)
            }
            return 0
        }
    }

    /// Writes a push's side effects in its transaction; a key written already is left as it is.
    static func write(_ effects: [PendingEffect], db: PostgresConnection, logger: Logger) async throws {
        guard !effects.isEmpty else { return }
        let now = serverMilliseconds()
        try await db.query(
            """
            INSERT INTO side_effects (key, kind, payload, created_at, due_at)
            SELECT e.key, e.kind, e.payload, \(now), \(now)
            FROM unnest(\(effects.map(\.key))::text[], \(effects.map(\.kind))::text[], \(effects.map { ByteBuffer(data: $0.payload) })::bytea[])
                AS e (key, kind, payload)
            ORDER BY e.key  -- two pushes naming the same keys take their locks in one order
            ON CONFLICT (key) DO NOTHING
            """,
            logger: logger
        )
    }
}
