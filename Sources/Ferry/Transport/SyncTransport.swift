import Foundation

/// One HTTP exchange with the sync server.
public struct TransportRequest: Sendable, Equatable {
    public var method: String
    /// Path and query, for example `/v1/pull?limit=500`.
    public var path: String
    public var headers: [String: String]
    public var body: Data?

    public init(method: String, path: String, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }
}

public struct TransportResponse: Sendable, Equatable {
    public var status: Int
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: Data

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
