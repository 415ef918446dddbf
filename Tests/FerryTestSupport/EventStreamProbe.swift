import Ferry
import Foundation

/// A `GET /v1/events` stream opened on a test server, its events collected as they arrive.
public actor EventStreamProbe {
    /// What the stream said, in order.
    public enum Item: Equatable, Sendable {
        /// An event, by name (`ready`, `change`).
        case event(String)
        /// A comment line (`: keep-alive`).
        case comment
        /// The server ended the stream.
        case ended
        /// The stream failed.
        case failed(String)
    }

    /// The answer's status; a refused stream's body is in `body`.
    public nonisolated let status: Int
    public nonisolated let headers: [String: String]
    public private(set) var body = Data()
    private var items: [Item] = []
    private var reader: Task<Void, Never>?

    private init(status: Int, headers: [String: String]) {
        self.status = status
        self.headers = headers
    }

    /// Opens the stream with `token` (none: no `Authorization`), naming `client` when given.
    public static func open(_ baseURL: String, token: String?, client: String? = nil) async throws -> EventStreamProbe {
        var headers = ["Accept": "text/event-stream"]
        if let token { headers["Authorization"] = "Bearer \(token)" }
        if let client { headers["Ferry-Client-ID"] = client }
        let stream = try await URLSessionTransport(baseURL: URL(string: baseURL)!)
            .openStream(TransportRequest(method: "GET", path: "/v1/events", headers: headers))
        let probe = EventStreamProbe(status: stream.status, headers: stream.headers)
        await probe.read(stream)
        return probe
    }

    private func read(_ stream: TransportStream) {
        guard status == 200 else {
            reader = Task {
                var data = Data()
                do {
                    for try await chunk in stream.body { data.append(chunk) }
                } catch {}
                self.setBody(data)
            }
            return
        }
        reader = Task {
            do {
                for try await event in ServerSentEvents(chunks: stream.body) {
                    switch event {
                    case .event(let name, _): self.append(.event(name))
                    case .comment: self.append(.comment)
                    }
                }
                self.append(.ended)
            } catch {
                self.append(.failed("\(error)"))
            }
        }
    }

    private func append(_ item: Item) { items.append(item) }
    private func setBody(_ data: Data) { body = data }

    /// The next item, waiting up to `limit` (real time: the server's own pacing is under test).
    public func next(within limit: Duration = .seconds(10)) async throws -> Item {
        let deadline = ContinuousClock.now + limit
        while items.isEmpty {
            guard ContinuousClock.now < deadline else { throw ProbeTimeout(limit: limit) }
            try await Task.sleep(for: .milliseconds(5))
        }
        return items.removeFirst()
    }

    /// The body of a refused stream, once it has arrived.
    public func refusal() async -> Data {
        await reader?.value
        return body
    }

    /// Items that arrived and were not taken yet.
    public var pending: [Item] { items }

    /// Takes every item that arrived.
    public func drain() -> [Item] {
        defer { items.removeAll() }
        return items
    }

    /// Closes the stream.
    public func close() {
        reader?.cancel()
    }
}

/// No item arrived in time.
public struct ProbeTimeout: Error, CustomStringConvertible {
    public let limit: Duration
    public var description: String { "no event within \(limit)" }
}
