import Ferry
import Foundation

/// The network between a client under test and its server, which a test takes down and brings
/// back (``goOffline()``, ``goOnline()``) and whose next attachment download it cuts mid-body
/// (``cutNextDownload(afterBytes:)``): a phone in a lift, a photo half fetched.
///
/// ```swift
/// let network = TestNetwork(server.transport())
/// let client = FerryClient(store: store, transport: network, token: server.tokenProvider(for: "alice"))
/// await network.goOffline()   // every request fails as with no connection, until goOnline()
/// ```
public actor TestNetwork: SyncTransport {
    private let base: any SyncTransport
    private var offline = false
    private var cutAfter: Int?

    /// A network in front of `base` (a ``FerryTestServer``'s `transport()`), online.
    public init(_ base: any SyncTransport) {
        self.base = base
    }

    /// Every request fails from now on, as with no connection (`URLError.notConnectedToInternet`).
    public func goOffline() { offline = true }

    /// Requests reach the server again.
    public func goOnline() { offline = false }

    /// The next attachment download's connection drops after `bytes` bytes of its body.
    public func cutNextDownload(afterBytes bytes: Int) { cutAfter = bytes }

    /// Passes `request` to the server, unless offline.
    public func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard !offline else { throw URLError(.notConnectedToInternet) }
        return try await base.send(request)
    }

    /// Opens the stream on the server, unless offline; an attachment download's body is cut
    /// when ``cutNextDownload(afterBytes:)`` asked it.
    public func openStream(_ request: TransportRequest) async throws -> TransportStream {
        guard !offline else { throw URLError(.notConnectedToInternet) }
        let stream = try await base.openStream(request)
        guard request.path.hasPrefix("/v1/attachments/"), let cut = cutAfter else { return stream }
        cutAfter = nil
        let body = stream.body
        return TransportStream(
            status: stream.status,
            headers: stream.headers,
            body: AsyncThrowingStream { continuation in
                let forward = Task {
                    var left = cut
                    do {
                        for try await chunk in body {
                            guard chunk.count < left else {
                                if left > 0 { continuation.yield(chunk.prefix(left)) }
                                throw URLError(.networkConnectionLost)
                            }
                            left -= chunk.count
                            continuation.yield(chunk)
                        }
                        continuation.finish()
                    } catch {
                        continuation.finish(throwing: error)
                    }
                }
                continuation.onTermination = { _ in forward.cancel() }
            }
        )
    }
}
