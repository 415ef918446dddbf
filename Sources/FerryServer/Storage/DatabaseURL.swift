import Foundation

/// Where a server keeps its data, as `ferry serve --database` names it:
/// `sqlite:PATH`, `sqlite::memory:`, or `postgres://USER:PASS@HOST:PORT/DB?sslmode=MODE`.
public enum DatabaseURL: Sendable, Equatable, CustomStringConvertible {
    /// A SQLite file; `nil` for an in-memory database.
    case sqlite(path: String?)
    /// A PostgreSQL database, shared by every server process that names it.
    case postgres(PostgresLocation)

    /// Parses a `--database` value. A PostgreSQL password missing from the URL is taken
    /// from `PGPASSWORD` in `environment`, as libpq does.
    public init(parsing text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(DatabaseURLError) {
        if text == "sqlite::memory:" {
            self = .sqlite(path: nil)
        } else if text.hasPrefix("sqlite:"), text.count > "sqlite:".count {
            self = .sqlite(path: String(text.dropFirst("sqlite:".count)))
        } else if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            self = .postgres(try PostgresLocation(parsing: text, environment: environment))
        } else {
            throw DatabaseURLError(
                text: text,
                problem: "is not a database URL Ferry knows; use sqlite:PATH (for example sqlite:ferry-server.sqlite), "
                    + "sqlite::memory:, or postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            )
        }
    }

    /// The URL with any password left out, for logs and messages.
    public var description: String {
        switch self {
        case .sqlite(let path?): "sqlite:\(path)"
        case .sqlite(nil): "sqlite::memory:"
        case .postgres(let location): location.description
        }
    }
}

/// A PostgreSQL server and database, from a `postgres://` URL.
public struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    /// How the connection is encrypted: the `sslmode` query parameter, with libpq's meanings.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// Plain TCP: the default, meant for loopback and private networks.
        case disable
        /// Encrypted, without checking the server's certificate (libpq's `require`).
        case require
        /// Encrypted, the certificate checked against the system's roots and the host name.
        case verifyFull = "verify-full"
    }

    /// The server's host name or IP address (an IPv6 address without brackets).
    public var host: String
    /// The server's TCP port; 5432 by default.
    public var port: Int
    /// The role to connect as.
    public var username: String
    /// The role's password; `nil` to connect without one.
    public var password: String?
    /// The database to use.
    public var database: String
    /// How the connection is encrypted; ``PostgresLocation/TLSMode/disable`` by default.
    public var tls: TLSMode

    /// A location from its parts; the defaults are PostgreSQL's usual port and no encryption.
    public init(host: String, port: Int = 5432, username: String, password: String? = nil, database: String, tls: TLSMode = .disable) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.tls = tls
    }

    init(parsing text: String, environment: [String: String]) throws(DatabaseURLError) {
        func failure(_ problem: String) -> DatabaseURLError { DatabaseURLError(text: text, problem: problem) }
        guard let components = URLComponents(string: text) else {
            throw failure("is not a valid URL; use postgres://USER:PASSWORD@HOST:PORT/DATABASE (percent-encode special characters)")
        }
        guard let host = components.host, !host.isEmpty else { throw failure("names no host; use postgres://USER@HOST:PORT/DATABASE") }
        guard let username = components.user, !username.isEmpty else {
            throw failure("names no user; use postgres://USER@HOST:PORT/DATABASE")
        }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else {
            throw failure("names no database; end it with /DATABASE, for example postgres://ferry@127.0.0.1:5432/ferry")
        }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw failure("has port \(port); use 1 to 65535") }
        guard components.fragment == nil else {
            throw failure("has a #fragment; a database URL has none (percent-encode a # in the password as %23)")
        }
        var tls = TLSMode.disable
        var seen: Set<String> = []
        for item in components.queryItems ?? [] {
            guard seen.insert(item.name).inserted else { throw failure("gives '\(item.name)' twice") }
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw failure("has sslmode=\(item.value ?? ""); use \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                tls = mode
            default:
                throw failure("has the parameter '\(item.name)', which Ferry does not know; the one it knows is sslmode")
            }
        }
        self.init(
            host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host,
            port: port,
            username: username,
            password: components.password ?? environment["PGPASSWORD"],
            database: database,
            tls: tls
        )
    }

    /// `postgres://USER@HOST:PORT/DATABASE`, never with the password.
    public var description: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        return "postgres://\(username)@\(host):\(port)/\(database)" + (tls == .disable ? "" : "?sslmode=\(tls.rawValue)")
    }
}

/// A `--database` value that Ferry cannot use, with the reason.
public struct DatabaseURLError: Error, Sendable, CustomStringConvertible {
    /// The value as given, password included; `description` masks it.
    public var text: String
    /// What is wrong with the value, phrased to follow it (like "names no host; …").
    public var problem: String

    /// The value with any password masked, followed by the problem.
    public var description: String {
        "'\(Self.masked(text))' \(problem)"
    }

    /// `text` with anything that may be a password starred: between `USER:` and the last `@`
    /// after `://`, and the value of any `password=` (a query parameter, or a libpq DSN).
    public static func masked(_ text: String) -> String {
        var result = text
        if let scheme = result.range(of: "://"), let at = result[scheme.upperBound...].lastIndex(of: "@"),
            let colon = result[scheme.upperBound..<at].firstIndex(of: ":")
        {
            result.replaceSubrange(result.index(after: colon)..<at, with: "***")
        }
        var searchFrom = result.startIndex
        while let key = result.range(of: "password=", options: .caseInsensitive, range: searchFrom..<result.endIndex) {
            let end = result[key.upperBound...].firstIndex { $0 == "&" || $0 == " " } ?? result.endIndex
            let offset = result.distance(from: result.startIndex, to: key.upperBound)
            result.replaceSubrange(key.upperBound..<end, with: "***")
            searchFrom = result.index(result.startIndex, offsetBy: offset + 3)
        }
        return result
    }
}
