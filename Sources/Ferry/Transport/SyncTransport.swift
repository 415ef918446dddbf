import Foundation

/// One HTTP exchange with the sync server.
public struct TransportRequest: Sendable, Equatable {
    /// The HTTP method: `GET` or `POST`.
    public var method: String
    /// Path and query, for example `/v1/pull?limit=500`.
    public var path: String
    /// Request headers; a client's requests carry `Authorization`, `Ferry-Client-ID` and, with a body, `Content-Type`.
    public var headers: [String: String]
    /// The JSON body of a push; `nil` for a `GET`.
    public var body: Data?

    /// A request, with no headers and no body unless given.
    public init(method: String, path: String, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }

    /// Where the request goes on the server at `base`: the path is appended to the base's own
    /// path, so a server behind a prefix (`https://example.com/sync`) is reached at
    /// `https://example.com/sync/v1/push`. `nil` when the two make no URL.
    public func url(on base: URL) -> URL? {
        var prefix = base.absoluteString
        while prefix.hasSuffix("/") { prefix.removeLast() }
        return URL(string: prefix + path)
    }
}

/// The server's answer to one `TransportRequest`, whatever its status: the client decides what it means.
public struct TransportResponse: Sendable, Equatable {
    /// The HTTP status code.
    public var status: Int
    /// Header names in lower case.
    public var headers: [String: String]
    /// The body; empty if there is none.
    public var body: Data

    /// A response; header names are lower-cased here (of two that differ only in case, one is kept).
    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { $1 })
        self.body = body
    }

    func integerHeader(_ name: String) -> Int? {
        headers[name.lowercased()].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
    }
}

/// How the client reaches the server. `URLSessionTransport` is the real one; tests wrap
/// it to count requests or inject faults, still talking to a real server.
public protocol SyncTransport: Sendable {
    /// Performs the exchange. Throws for failures below HTTP (connection refused, reset, timeout).
    func send(_ request: TransportRequest) async throws -> TransportResponse
}
