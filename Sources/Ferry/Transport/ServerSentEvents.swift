import Foundation

/// The events of a `text/event-stream` body, read as its chunks arrive (the WHATWG "server-sent
/// events" format, as much of it as Ferry's stream uses: `event` names, `data`, comments).
///
/// Hand-written because the one Swift package for it on hand (mattt/EventSource) reads bytes
/// with `URLSession.bytes(for:)`, which Linux's Foundation lacks; this is forty lines.
package struct ServerSentEvents<Chunks: AsyncSequence & Sendable>: AsyncSequence, Sendable where Chunks.Element == Data {
    /// One dispatched event, or a comment line.
    package enum Event: Equatable, Sendable {
        /// An event named `name` (`message` when unnamed) with its data.
        case event(name: String, data: String)
        /// A comment (`: keep-alive`): the connection is alive.
        case comment
    }

    let chunks: Chunks

    package init(chunks: Chunks) { self.chunks = chunks }

    package struct AsyncIterator: AsyncIteratorProtocol {
        var chunks: Chunks.AsyncIterator
        var buffer = Data()
        var name = ""
        var data: [String] = []
        var ready: [Event] = []

        package mutating func next() async throws -> Event? {
            while ready.isEmpty {
                guard let chunk = try await chunks.next() else { return nil }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    var line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    if line.hasSuffix("\r") { line.removeLast() }
                    take(line)
                }
                // A line that never ends is not an event stream: refuse it rather than hold its bytes.
                if buffer.count > 64 * 1024 { throw URLError(.cannotParseResponse) }
            }
            return ready.removeFirst()
        }

        private mutating func take(_ line: String) {
            if line.isEmpty {
                if !data.isEmpty || !name.isEmpty { ready.append(.event(name: name.isEmpty ? "message" : name, data: data.joined(separator: "\n"))) }
                (name, data) = ("", [])
            } else if line.hasPrefix(":") {
                ready.append(.comment)
            } else {
                let parts = line.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
                var value = parts.count > 1 ? String(parts[1]) : ""
                if value.hasPrefix(" ") { value.removeFirst() }
                switch parts[0] {
                case "event": name = value
                case "data": data.append(value)
                default: break  // id, retry: Ferry's stream does not use them
                }
            }
        }
    }

    package func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(chunks: chunks.makeAsyncIterator())
    }
}
