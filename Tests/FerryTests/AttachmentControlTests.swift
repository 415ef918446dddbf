import ConcurrencyExtras
import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// What an app drives of its attachments (issue 50): progress it can draw per transfer, a badge
/// of what waits while idle and offline, uploads in the order it asks, a file it gives up, a
/// download it stops, and an attach refused at once where the user may only read.
@Suite("Attachments an app drives")
struct AttachmentControlTests {
    @Test("two downloads at once each show their own bytes of their own total, a few updates each, not one per network chunk")
    func perTransferProgress() async throws {
        try await TestServer.run { server in
            let field = try AttachmentSyncTests.openStore()
            let worker = ClientFixture.client(store: field, server: server, configuration: AttachmentSyncTests.configuration(chunk: 8 << 20))
            var digests: [String: Int64] = [:]
            for (index, size) in [2_000_000, 3_000_000].enumerated() {
                let digest = try await field.attach(fileAt: try AttachmentSyncTests.photo(size, seed: UInt8(50 + index)).url)
                try await AttachmentSyncTests.insertJob("j\(index)", photo: digest, in: field)
                digests[digest] = Int64(size)
            }
            try await worker.sync()

            let office = try AttachmentSyncTests.openStore()
            let desk = ClientFixture.client(store: office, server: server, configuration: AttachmentSyncTests.configuration(chunk: 8 << 20))
            try await desk.sync()
            let seen = LockIsolated<[AttachmentTransfer]>([])
            let updates = await desk.statusUpdates()
            let expected = Set(digests.keys)
            // Watches until both transfers were seen and none is under way any more.
            let watcher = Task {
                for await status in updates {
                    let transfers = status.attachments.transfers
                    seen.withValue { $0.append(contentsOf: transfers) }
                    if Set(seen.value.map(\.digest)) == expected, transfers.isEmpty { break }
                }
            }
            let (first, second) = (Array(digests.keys)[0], Array(digests.keys)[1])
            async let one = desk.attachment(first)
            async let two = desk.attachment(second)
            _ = try await (one, two)
            await watcher.value
            for (digest, size) in digests {
                let mine = seen.value.filter { $0.digest == digest && $0.direction == .download }
                #expect(mine.allSatisfy { $0.totalBytes == size || $0.totalBytes == nil }, "each transfer has its own total")
                #expect(mine.map(\.bytesDone) == mine.map(\.bytesDone).sorted(), "its bytes only grow")
                #expect(mine.last?.fractionDone == 1, "\(digest.suffix(8)) ends done: \(mine.map(\.bytesDone))")
                let updates = Set(mine.map(\.bytesDone)).count
                #expect(updates <= 20, "\(updates) updates for \(size) bytes")
            }
            #expect(await desk.status.attachments.transfers.isEmpty)
        }
    }

    @Test("a badge of what waits while offline and idle, uploads the highest priority first, a file given up, an attach where one may only read")
    func waitingPriorityDiscardReadOnly() async throws {
        try await TestServer.run { server in
            let store = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(space: true))
            let client = ClientFixture.client(store: store, server: server, configuration: AttachmentSyncTests.configuration())
            let low = try await store.attach(fileAt: try AttachmentSyncTests.photo(300_000, seed: 61).url, priority: .low)
            let high = try await store.attach(fileAt: try AttachmentSyncTests.photo(200_000, seed: 62).url, priority: .high)
            try await AttachmentSyncTests.insertJob("j1", photo: low, in: store)
            try await AttachmentSyncTests.insertJob("j2", photo: high, in: store)
            let idle = await client.status
            #expect(idle.attachments.uploadsWaiting == 2 && idle.attachments.uploadBytes == 500_000)
            #expect(idle.progressText == "2 changes and 2 files (500 KB) waiting", "\(idle.progressText)")

            // A file given up: refused while a change references it, gone once none does.
            let spare = try await store.attach(fileAt: try AttachmentSyncTests.photo(1000, seed: 63).url)
            await #expect(throws: FerryError.self) { try await store.discardAttachment(low) }
            await #expect(throws: FerryError.self) {
                _ = try await store.attach(fileAt: try AttachmentSyncTests.photo(1000, seed: 65).url, contentType: "public.jpeg")
            }
            try await store.discardAttachment(spare)
            #expect(store.localAttachment(spare) == nil)

            try await client.sync()
            let uploaded = try await client.journal.events().filter { $0.kind == .attachmentUploaded }.compactMap { $0[.digest] }
            #expect(uploaded == [high, low], "the high-priority photo goes first")
            await #expect(throws: FerryError.self, "a row references it: the server may hold its only other copy") {
                try await store.discardAttachment(high)
            }
            #expect(await client.status.attachments.uploadsWaiting == 0)

            // A space the user may only read: refused before a byte is copied.
            try await server.makeSpace("crew", admin: "bob", members: ["alice": .read])
            try await client.sync()
            await #expect(throws: FerryError.self) {
                _ = try await store.attach(fileAt: try AttachmentSyncTests.photo(1000, seed: 64).url, space: "crew")
            }
        }
    }

    @Test("the media type travels with the photo: the server keeps it and answers it, and another device's file is named .jpg, with its size")
    func mediaTypeAndSize() async throws {
        try await TestServer.run { server in
            let field = try AttachmentSyncTests.openStore()
            let worker = ClientFixture.client(store: field, server: server, configuration: AttachmentSyncTests.configuration())
            let (url, bytes) = try AttachmentSyncTests.photo(120_000, seed: 71)
            let digest = try await field.attach(fileAt: url, contentType: "image/jpeg")
            try await AttachmentSyncTests.insertJob("j1", photo: digest, in: field)
            try await worker.sync()
            let token = try await TestServer.token(for: "alice")
            let served = try await server.send(.GET, "/v1/attachments/\(digest)", token: token)
            #expect(served.headers.first(name: "Content-Type") == "image/jpeg")
            #expect(served.headers.first(name: "X-Content-Type-Options") == "nosniff")

            let office = try AttachmentSyncTests.openStore()
            let desk = ClientFixture.client(store: office, server: server, configuration: AttachmentSyncTests.configuration())
            try await desk.sync()
            let file = try await desk.attachment(digest)
            #expect(file.pathExtension == "jpg", "\(file.lastPathComponent)")
            #expect(try Data(contentsOf: file) == bytes)
            // A download the server refuses says why in a code a screen can match.
            await #expect {
                _ = try await desk.attachment("sha256:" + String(repeating: "ab", count: 32))
            } throws: { error in
                (error as? FerryError)?.code == .attachment && (error as? FerryError)?.serverCode == "not_found"
            }
            let info = try await office.attachmentInfo(digest)
            #expect(info?.size == 120_000 && info?.contentType == "image/jpeg" && info?.localFile == file && info?.waitsForUpload == false)

            // A media type that is not one is refused, saying so.
            let refused = try await server.send(
                .POST,
                "/v1/attachments/sha256:\(String(repeating: "0", count: 64))",
                token: token,
                headers: [("Content-Type", "not a type")],
                body: Data([1])
            )
            #expect(refused.status == 400 && refused.errorMessage?.contains("is not a media type") == true)
        }
    }

    @Test("a download stopped by cancelDownload throws CancellationError to its caller; the next ask downloads it anew")
    func cancelThenAskAgain() async throws {
        try await TestServer.run { server in
            let (digest, bytes) = try await AttachmentSyncTests.syncedPhoto(300_000, seed: 81, server: server)

            let (entered, enter) = AsyncStream<Void>.makeStream()
            let (gate, gateOpen) = AsyncStream<Void>.makeStream()  // never opened: a held request ends only by cancellation
            defer { gateOpen.finish() }
            let held = LockIsolated(true)
            let transport = InterceptingTransport(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                stream: { request, next in
                    if held.value, request.path.hasPrefix("/v1/attachments/") {
                        enter.yield()
                        for await _ in gate {}
                        try Task.checkCancellation()
                    }
                    return try await next(request)
                }
            )
            let office = try AttachmentSyncTests.openStore()
            let desk = ClientFixture.client(store: office, server: server, transport: transport, configuration: AttachmentSyncTests.configuration())
            try await desk.sync()
            let first = Task { try await desk.attachment(digest) }
            var waiting = entered.makeAsyncIterator()
            _ = await waiting.next()
            await desk.cancelDownload(digest)
            await #expect(throws: CancellationError.self) { _ = try await first.value }
            held.setValue(false)
            #expect(try Data(contentsOf: try await desk.attachment(digest)) == bytes)
        }
    }

    @Test("a screen asking for a photo while the eager fetch downloads it shares that download: its bytes come once")
    func eagerAndAskShareOneDownload() async throws {
        try await TestServer.run { server in
            let (digest, bytes) = try await AttachmentSyncTests.syncedPhoto(300_000, seed: 82, server: server)

            let (gate, gateOpen) = AsyncStream<Void>.makeStream()
            let fromStart = LockIsolated(0)  // requests for the photo's first bytes: one per download
            let transport = InterceptingTransport(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                stream: { request, next in
                    if request.path.hasPrefix("/v1/attachments/"), request.headers["Range"]?.hasPrefix("bytes=0-") == true {
                        fromStart.withValue { $0 += 1 }
                        for await _ in gate {}
                    }
                    return try await next(request)
                }
            )
            let office = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(downloads: .eager))
            let desk = ClientFixture.client(store: office, server: server, transport: transport, configuration: AttachmentSyncTests.configuration())
            let run = Task { try await desk.sync() }
            while fromStart.value == 0 { await Task.yield() }  // the eager fetch's download, held
            let asked = Task { try await desk.attachment(digest) }
            // A second download, if the ask starts one, arrives here at once; a shared one never does.
            for _ in 0..<20_000 where fromStart.value == 1 { await Task.yield() }
            gateOpen.finish()
            #expect(try Data(contentsOf: try await asked.value) == bytes)
            _ = try await run.value
            #expect(fromStart.value == 1, "the photo was downloaded \(fromStart.value) times")
        }
    }

    @Test(
        "a sync cancelled while its eager fetch downloads a photo ends at once, and the download with it; a screen's ask after it starts anew",
        .timeLimit(.minutes(1))
    )
    func cancelledSyncStopsItsDownload() async throws {
        try await TestServer.run { server in
            let (digest, bytes) = try await AttachmentSyncTests.syncedPhoto(300_000, seed: 83, server: server)

            let (gate, gateOpen) = AsyncStream<Void>.makeStream()  // opened only for the screen's ask
            defer { gateOpen.finish() }
            let held = LockIsolated(0)
            let transport = InterceptingTransport(
                URLSessionTransport(baseURL: URL(string: server.baseURL)!),
                stream: { request, next in
                    if request.path.hasPrefix("/v1/attachments/"),
                        held.withValue({
                            $0 += 1
                            return $0
                        }) == 1
                    {
                        for await _ in gate {}  // ends when the download is cancelled
                        try Task.checkCancellation()
                    }
                    return try await next(request)
                }
            )
            let office = try AttachmentSyncTests.openStore(AttachmentSyncTests.jobs(downloads: .eager))
            let desk = ClientFixture.client(store: office, server: server, transport: transport, configuration: AttachmentSyncTests.configuration())
            let run = Task { try await desk.sync() }
            while held.value == 0 { await Task.yield() }
            run.cancel()
            _ = await run.result  // before the fix: never, the download held at the gate outlived its run
            #expect(try Data(contentsOf: try await desk.attachment(digest)) == bytes)
        }
    }
}
