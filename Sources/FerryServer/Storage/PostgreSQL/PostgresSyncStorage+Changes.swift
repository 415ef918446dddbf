import FerryProtocol
import Foundation
import Logging
import PostgresNIO

/// The event streams' signals on PostgreSQL: NOTIFY on one channel, in the transaction of the
/// commit they describe, and one connection per process that LISTENs.
extension PostgresSyncStorage {
    /// The channel every process listens on.
    static let changeChannel = "ferry_changes"
    /// How often the listening connection is checked with a query that must answer within 5 s.
    static let listenerCheckInterval: Duration = .seconds(10)
    /// The listening connection's `application_name`: an operator (or a test) can find it in `pg_stat_activity`.
    public static let listenerName = "ferry-listen"

    /// Sends `signals` on `db`: inside a transaction, at its commit.
    static func notify(_ signals: [ChangeSignal], db: PostgresConnection, logger: Logger) async throws {
        guard !signals.isEmpty else { return }
        try await db.query(
            "SELECT pg_notify(\(changeChannel), payload) FROM unnest(\(signals.map(\.payload))::text[]) AS payload",
            logger: logger
        )
    }

    /// A connection that `LISTEN`s, and the payloads it hears, buffered until read.
    struct Listening: Sendable {
        let connection: PostgresConnection
        let payloads: AsyncThrowingStream<String, any Error>
        /// Holds the `LISTEN` open; cancelling it ends it and closes the connection.
        let task: Task<Void, Never>

        func close() async {
            task.cancel()
            await task.value
        }
    }

    /// Connects, and returns once it listens on the change channel.
    static func listen(_ configuration: PostgresConnection.Configuration, logger: Logger) async throws -> Listening {
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        let (payloads, heard) = AsyncThrowingStream.makeStream(of: String.self)
        let (listening, started) = AsyncStream.makeStream(of: Void.self)
        let task = Task {
            do {
                try await connection.listen(on: changeChannel) { notifications in
                    started.yield()  // LISTEN has been answered
                    started.finish()
                    for try await notification in notifications { heard.yield(notification.payload) }
                }
                heard.finish()
            } catch {
                heard.finish(throwing: error)
            }
            started.finish()
            try? await connection.close()
        }
        var answered = listening.makeAsyncIterator()
        if await answered.next() == nil {
            // It failed before listening: its error is at the end of the payloads.
            for try await _ in payloads {}
            throw ListeningEnded()
        }
        return Listening(connection: connection, payloads: payloads, task: task)
    }

    /// Calls `deliver` with what each commit changed until cancelled (see ``SyncStorage/followChanges(_:)``).
    public func followChanges(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async throws {
        // The first connection has listened since `connect`; any later one follows a gap.
        var ready = firstListening.withLockedValue { $0.take() }
        var failures = 0
        while !Task.isCancelled {
            do {
                let afterGap = ready == nil
                let listening: Listening
                if let ready { listening = ready } else { listening = try await Self.listen(listenerConfiguration, logger: logger) }
                ready = nil
                defer { Task { await listening.close() } }
                // Listening again: whatever committed while nobody listened may have been missed,
                // so every stream is told to pull.
                if afterGap { deliver([.everything]) }
                failures = 0
                try await withThrowingTaskGroup(of: Void.self) { [logger] group in
                    group.addTask {
                        for try await payload in listening.payloads { deliver([ChangeSignal(payload: payload)]) }
                        throw ListeningEnded()
                    }
                    // A connection that stalls without an error (a partition, a frozen backend)
                    // would hear nothing, silently: a query must come back in time.
                    group.addTask {
                        while true {
                            try await Task.sleep(for: Self.listenerCheckInterval)
                            try await withTimeLimit(.seconds(5), clock: ContinuousClock()) {
                                _ = try await listening.connection.query("SELECT 1", logger: logger)
                            }
                        }
                    }
                    try await group.next()
                    group.cancelAll()
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

/// The listening connection stopped hearing (its `LISTEN` ended without an error).
private struct ListeningEnded: Error, CustomStringConvertible {
    var description: String { "the LISTEN connection ended" }
}
