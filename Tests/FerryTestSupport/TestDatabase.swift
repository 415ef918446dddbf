import FerryServer
import Foundation
import GRDB
import Logging
import PostgresNIO

/// The storage engines the conformance suite runs against: every server test that takes a
/// `StorageBackend` argument runs once on each.
public enum StorageBackend: String, Sendable, CaseIterable, CustomStringConvertible {
    case sqlite
    case postgres

    public var description: String { rawValue }
}

/// A fresh, empty database of one backend: a SQLite file in a test folder, or a database of
/// its own in the PostgreSQL cluster that `scripts/with-postgres.sh` started.
public struct TestDatabase: Sendable {
    public let url: DatabaseURL
    public var backend: StorageBackend {
        if case .postgres = url { .postgres } else { .sqlite }
    }

    public init(url: DatabaseURL) {
        self.url = url
    }

    public static func make(_ backend: StorageBackend) async throws -> TestDatabase {
        switch backend {
        case .sqlite: TestDatabase(url: .sqlite(path: TestServer.temporaryDatabasePath()))
        case .postgres: TestDatabase(url: .postgres(try await TestPostgres.createDatabase()))
        }
    }

    /// Opens the database as `ferry serve` would.
    public func open(poolSize: Int = 4) async throws -> any SyncStorage {
        switch url {
        case .sqlite(let path): try SQLiteSyncStorage(path: path)
        case .postgres(let location): try await PostgresSyncStorage.connect(to: location, poolSize: poolSize, logger: TestPostgres.quiet)
        }
    }

    /// Runs SQL of a test's own on the database, beside the server (one statement for PostgreSQL).
    public func execute(_ sql: String) async throws {
        switch url {
        case .sqlite(let path):
            guard let path else { throw TestFailure("an in-memory database cannot be reached from a test") }
            try await DatabaseQueue(path: path).write { db in try db.execute(sql: sql) }
        case .postgres(let location):
            try await TestPostgres.withConnection(to: location) { connection in
                _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestPostgres.quiet)
            }
        }
    }
}

/// The throwaway PostgreSQL cluster of a test run, named by `FERRY_TEST_POSTGRES_URL`.
public enum TestPostgres {
    static let quiet = Logger(label: "ferry.test.postgres", factory: { _ in SwiftLogNoOpLogHandler() })

    /// The cluster's superuser URL; a test that needs PostgreSQL fails, saying how to get one, without it.
    public static func clusterLocation() throws -> PostgresLocation {
        guard let text = ProcessInfo.processInfo.environment["FERRY_TEST_POSTGRES_URL"] else {
            throw TestFailure(
                "this test runs on PostgreSQL and FERRY_TEST_POSTGRES_URL is not set: run the tests with "
                    + "scripts/test.sh (or scripts/with-postgres.sh swift test …), which starts a throwaway cluster"
            )
        }
        guard case .postgres(let location) = try DatabaseURL(parsing: text) else {
            throw TestFailure("FERRY_TEST_POSTGRES_URL is not a postgres:// URL: \(text)")
        }
        return location
    }

    /// A new, empty database in the cluster.
    public static func createDatabase() async throws -> PostgresLocation {
        var location = try clusterLocation()
        let name = "ferry_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        try await withConnection(to: location) { connection in
            _ = try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: quiet)
        }
        location.database = name
        return location
    }

    @discardableResult
    public static func withConnection<T: Sendable>(to location: PostgresLocation, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let configuration = PostgresConnection.Configuration(
            host: location.host,
            port: location.port,
            username: location.username,
            password: location.password,
            database: location.database,
            tls: .disable
        )
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: quiet)
        } catch {
            throw TestFailure("cannot connect to the test PostgreSQL at \(location): \(String(reflecting: error))")
        }
        do {
            let result = try await body(connection)
            try await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }
}
