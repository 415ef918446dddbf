import ConcurrencyExtras
import Ferry
import FerryTestSupport
import Foundation
import Testing

/// A transport of the app's own that implements only `send(_:)` (certificate pinning, say)
/// carries attachments both ways (issue 50): downloads ask a `Range` of a chunk a request, and
/// wait as every request does.
@Suite("Attachments through a transport that only sends")
struct AttachmentTransportTests {
    /// The app's transport: `send(_:)` only, so `openStream(_:)` is the protocol's default.
    struct SendOnlyTransport: SyncTransport {
        let base: URLSessionTransport
        func send(_ request: TransportRequest) async throws -> TransportResponse { try await base.send(request) }
    }

    @Test("a photo uploaded by one device downloads on another whose transport only sends, a chunk a request, byte for byte")
    func downloadThroughSend() async throws {
        try await TestServer.run { server in
            let (digest, bytes) = try await AttachmentSyncTests.syncedPhoto(700_000, seed: 31, server: server)

            let office = try AttachmentSyncTests.openStore()
            let transport = SendOnlyTransport(base: URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let dispatcher = ClientFixture.client(
                store: office,
                server: server,
                transport: transport,
                configuration: AttachmentSyncTests.configuration()
            )
            try await dispatcher.sync()
            let file = try await dispatcher.attachment(digest)
            #expect(try Data(contentsOf: file) == bytes)
            let ranges = try await dispatcher.journal.events().filter { $0[.method] == "GET" && $0[.path]?.hasPrefix("/v1/attachments/") == true }
            #expect(ranges.count == 3, "700,000 bytes in chunks of 256 KiB")
        }
    }

    @Test("a download answered 429 or 503 waits what its Retry-After asks, as every request of the client does, then goes on")
    func downloadWaitsRetryAfter() async throws {
        try await TestServer.run { server in
            let (digest, bytes) = try await AttachmentSyncTests.syncedPhoto(300_000, seed: 32, server: server)

            let answered = LockIsolated(0)
            let transport = InterceptingTransport(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                stream: { request, next in
                    guard request.path.hasPrefix("/v1/attachments/") else { return try await next(request) }
                    let refusal = [1: (429, "7"), 2: (503, "11")][
                        answered.withValue {
                            $0 += 1
                            return $0
                        }
                    ]
                    guard let (status, seconds) = refusal else { return try await next(request) }
                    return TransportStream(status: status, headers: ["retry-after": seconds], body: AsyncThrowingStream { $0.finish() })
                }
            )
            let office = try AttachmentSyncTests.openStore()
            let desk = ClientFixture.client(store: office, server: server, transport: transport, configuration: AttachmentSyncTests.configuration())
            try await desk.sync()
            #expect(try Data(contentsOf: try await desk.attachment(digest)) == bytes)
            let waits = try await desk.journal.events().filter { $0.kind == .wait }.compactMap { $0[.seconds] }
            #expect(waits == ["7.000", "11.000"], "a backoff instead of Retry-After: \(waits)")
        }
    }
}
