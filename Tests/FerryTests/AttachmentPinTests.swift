import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// A file a device holds is never evicted while a queued change or a dead letter references it
/// (issue 50): uploaded, its record not yet accepted, the server forgets the upload a day later,
/// and the phone's file may be the photo's last copy.
@Suite("Attachments: what eviction keeps")
struct AttachmentPinTests {
    @Test("a photo uploaded whose record waits behind a failing push is not evicted by large downloads, and its record goes up later")
    func uploadedButUnacceptedStays() async throws {
        try await TestServer.run { server in
            // Another device of the user puts a large video on the server.
            let office = try AttachmentSyncTests.openStore()
            let desk = ClientFixture.client(store: office, server: server, configuration: AttachmentSyncTests.configuration())
            let video = try await office.attach(fileAt: try AttachmentSyncTests.photo(900_000, seed: 21).url)
            try await AttachmentSyncTests.insertJob("v1", photo: video, in: office)
            try await desk.sync()

            let field = try AttachmentSyncTests.openStore()
            let pushes = LockIsolated(false)
            let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                if !pushes.value, request.method == "POST", request.path == "/v1/push" { throw URLError(.cannotConnectToHost) }
                return try await next(request)
            }
            var configuration = AttachmentSyncTests.configuration()
            configuration.attachmentCacheBytes = 1_000_000
            let phone = ClientFixture.client(store: field, server: server, transport: transport, configuration: configuration)
            let (url, bytes) = try AttachmentSyncTests.photo(600_000, seed: 22)
            let photo = try await field.attach(fileAt: url)
            try FileManager.default.removeItem(at: url)  // the camera's file is gone
            try await AttachmentSyncTests.insertJob("j1", photo: photo, in: field)
            await #expect(throws: FerryError.self) { try await phone.sync() }
            #expect(try await AttachmentSyncTests.head(photo, server: server) == 200, "the photo went up before its record")

            // The video is fetched: past the budget, but the photo is the only copy of a change not yet accepted.
            _ = try await phone.attachment(video)
            let kept = try #require(field.localAttachment(photo), "the photo was evicted while its record waited")
            #expect(try Data(contentsOf: kept) == bytes)

            pushes.setValue(true)
            try await phone.sync()
            let records = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(records["jobs/j1"]?.data?["photo"] == .string(photo))
        }
    }
}
