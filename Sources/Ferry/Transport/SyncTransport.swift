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

/// The server's answer to one ``TransportRequest``, whatever its status: the client decides what it means.
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
        Self.integer(headers[name.lowercased()])
    }

    /// A header's whole number, spaces around it allowed; `nil` for anything else. Every answer's
    /// headers are read by this one rule, a streamed one's too.
    static func integer(_ value: String?) -> Int? {
        value.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
    }
}

/// How the client reaches the server. ``URLSessionTransport`` is the real one; tests wrap
/// it to count requests or inject faults, still talking to a real server.
///
/// An app's own transport (for certificate pinning, say) must implement `send(_:)`: every
/// exchange of a sync and every attachment upload goes through it, with the request's method,
/// path, headers and body as given (`Range`, `Upload-Offset` and `Upload-Complete` included),
/// and answers the status, the headers and the whole body. `openStream(_:)` is optional: without
/// it there are no live changes, and attachments download a chunk a request through `send(_:)`.
public protocol SyncTransport: Sendable {
    /// Performs the exchange. Throws for failures below HTTP (connection refused, reset, timeout).
    func send(_ request: TransportRequest) async throws -> TransportResponse

    /// Starts a streamed exchange (`GET /v1/events`, and an attachment's download) and returns
    /// once its head has arrived; the body arrives as it is written, until the server ends it or
    /// the consumer stops reading (which closes the connection). Throws as `send(_:)` does. A
    /// transport that cannot stream throws ``EventStreamsUnsupported`` (the default): the session
    /// stays without live changes, and downloads go through `send(_:)`, a `Range` of at most
    /// ``SyncConfiguration/attachmentChunkBytes`` a request, each held whole in memory.
    func openStream(_ request: TransportRequest) async throws -> TransportStream
}

extension SyncTransport {
    /// Streams are not supported: throws ``EventStreamsUnsupported``.
    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        throw EventStreamsUnsupported()
    }
}

/// The answer to a streamed exchange: its head, and its body as it arrives.
public struct TransportStream: Sendable {
    /// The HTTP status code.
    public var status: Int
    /// Header names in lower case.
    public var headers: [String: String]
    /// The body's bytes in the chunks they arrived in; it ends when the server ends the body,
    /// and throws when the connection fails. Stop iterating to close the connection.
    public var body: AsyncThrowingStream<Data, any Error>

    /// A stream's answer; header names are lower-cased here.
    public init(status: Int, headers: [String: String], body: AsyncThrowingStream<Data, any Error>) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { $1 })
        self.body = body
    }

    /// The whole body, up to `limit` bytes: an error's envelope.
    func collect(upTo limit: Int = 64 * 1024) async throws -> Data {
        var data = Data()
        for try await chunk in body where data.count < limit { data.append(chunk) }
        return data
    }
}

/// The transport cannot stream a body as it arrives, so the server's event stream cannot be read.
public struct EventStreamsUnsupported: Error, Sendable, CustomStringConvertible {
    /// An error; the session keeps syncing on its other triggers.
    public init() {}

    /// What happened, for logs.
    public var description: String { "this transport cannot stream; live changes are off (syncs still run on every other trigger)" }
}
