import Foundation
import Logging
import PostgresNIO

/// The event streams' signals on PostgreSQL: NOTIFY on one channel, in the transaction of the
/// commit they describe, and one connection per process that LISTENs.
extension PostgresSyncStorage {
    /// The channel every process listens on.
    static let changeChannel = "ferry_changes"
    /// The listening connection's `application_name`: an operator (or a test) can find it in `pg_stat_activity`.
    public static let listenerName = "ferry-listen"

    /// Hands `signals` to every process's followers (`followChanges`).
    public func announce(_ signals: [ChangeSignal]) async throws {
        guard !signals.isEmpty else { return }
        try await withDatabase { [logger] db in try await Self.notify(signals, db: db, logger: logger) }
    }

    /// Sends `signals` on `db`: inside a transaction, at its commit.
    static func notify(_ signals: [ChangeSignal], db: PostgresConnection, logger: Logger) async throws {
        guard !signals.isEmpty else { return }
        try await db.query(
            "SELECT pg_notify(\(changeChannel), payload) FROM unnest(\(signals.map(\.payload))::text[]) AS payload",
            logger: logger
        )
    }

    /// Calls `deliver` with what each commit changed until cancelled (see ``SyncStorage/followChanges(_:)``).
    public func followChanges(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async throws {
        var failures = 0
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(configuration: listenerConfiguration, id: 1, logger: logger)
                defer { Task { try? await connection.close() } }
                try await connection.listen(on: Self.changeChannel) { notifications in
                    // Listening now: whatever committed while nobody listened may have been
                    // missed, so every stream is told to pull.
                    failures = 0
                    deliver([.everything])
                    for try await notification in notifications { deliver([ChangeSignal(payload: notification.payload)]) }
                }
            } catch  where Task.isCancelled {
                return
            } catch {
                failures += 1
                logger.warning("lost the connection that listens for changes; reconnecting", metadata: ["error": "\(Self.explain(error))"])
            }
            // Again at once after a connection that worked, then backing off to 5 s against a database that is down.
            let delay = failures <= 1 ? Duration.zero : .milliseconds(min(5_000, 250 << min(failures, 5)))
            try? await Task.sleep(for: delay)
        }
    }
}
