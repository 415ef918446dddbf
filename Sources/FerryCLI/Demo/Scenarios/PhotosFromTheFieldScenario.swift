import Ferry
import FerryProtocol
import FerryTesting
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Photos from the field (ATTACHMENTS.md): a worker offline photographs 20 finished jobs of a
/// team space; the network returns and drops twice mid-upload; the jobs reach the server only
/// with their photos, and the dispatcher sees them at once and downloads a photo only when
/// opening it.
struct PhotosFromTheFieldScenario: DemoScenario {
    let name = "photos-from-the-field"
    let title = "Photos from the field: 20 photos of 2 MB taken offline, the network dropping twice mid-upload, a dispatcher opening one"

    static let jobs = SyncedTable(table: "jobs", space: .column("team_id"), attachments: ["photo"])
    static let photoBytes = 2_000_000
    static let photoCount = 20

    func run(in directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        try await withServer(in: directory, rateLimit: .default) { server in
            try await play(server: server, directory: directory, output: output)
        }
    }

    private static var schema: DatabaseMigrator {
        var schema = DatabaseMigrator()
        schema.registerMigration("field-app-v1") { db in
            try db.execute(sql: "CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, team_id TEXT, title TEXT, photo TEXT)")
        }
        return schema
    }

    private func phone(_ user: String, in directory: URL, server: FerryTestServer, transport: (any SyncTransport)? = nil) throws -> FerryClient {
        let store = try FerryStore(path: directory.appendingPathComponent("\(user).sqlite").path, schema: Self.schema, tables: [Self.jobs])
        return FerryClient(store: store, transport: transport ?? server.transport(), token: server.tokenProvider(for: user))
    }

    private func play(server: FerryTestServer, directory: URL, output: DemoOutput) async throws -> ScenarioOutcome {
        let origin = Date()
        PeakMemory.reset()  // this scenario's peak, not the earlier ones'
        let memoryBefore = PeakMemory.megabytes(field: "VmRSS") ?? 0
        let network = FieldNetwork(server.transport())
        let dispatcher = try phone("dispatcher", in: directory, server: server)
        let worker = try phone("worker", in: directory, server: server, transport: network)
        try await dispatcher.createSpace("team-7")
        try await dispatcher.setRole(.write, of: "worker", in: "team-7")
        try await worker.sync()

        // In a basement without a network: 20 jobs finished, each with its photo.
        network.state.withLockedValue { $0.online = false }
        let digests = try await finishJobs(on: worker, photos: directory.appendingPathComponent("camera", isDirectory: true))
        _ = try? await worker.sync()
        let photoTotal = Self.photoBytes * Self.photoCount
        output.say("Offline, the worker finishes 20 jobs with a photo each (\(Self.megabytes(photoTotal)) MB); the sync fails, nothing is lost.")

        // The network returns, and drops twice in the middle of a photo.
        network.state.withLockedValue { ($0.online, $0.dropsLeft) = (true, 2) }
        let returned = Date()
        let report = try await worker.sync()
        let uploaded = Date()
        output.say(
            "The network returns: \(report.upload.attachmentsUploaded) photos and \(report.upload.acknowledged) jobs reach the server in "
                + "\(Self.milliseconds(returned, uploaded)) ms, through \(network.state.withLockedValue(\.drops)) dropped connections."
        )

        // The dispatcher's device: the jobs at once, a photo when opened.
        try await dispatcher.sync()
        let jobsShown = try await dispatcher.store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM jobs") ?? 0 }
        let heldBefore = digests.filter { dispatcher.store.localAttachment($0) != nil }.count
        let opened = try await dispatcher.attachment(digests[6])
        let firstPhoto = Date()
        let openedIntact = try Data(contentsOf: opened) == Self.photo(seed: 7)
        let heldAfter = digests.filter { dispatcher.store.localAttachment($0) != nil }.count
        output.say(
            "The dispatcher sees \(jobsShown) jobs and holds \(heldBefore) photos; opening job 7 downloads its photo: "
                + "\(Self.milliseconds(returned, firstPhoto)) ms after the network returned."
        )
        let remote = try await server.records(of: "dispatcher")
        let withPhotos = remote.values.filter {
            $0.data?["photo"].flatMap { if case .string(let digest) = $0 { digest } else { nil } }.map(digests.contains) == true
        }
        let sent = network.state.withLockedValue(\.attachmentBytes)
        let peak = PeakMemory.megabytes() ?? 0
        let growth = Int((peak - memoryBefore).rounded())
        let workerJournal = try await worker.journal.events().filter { $0.at >= origin }
        let dispatcherJournal = try await dispatcher.journal.events().filter { $0.at >= origin }
        return ScenarioOutcome(
            metrics: [
                "photos": Self.photoCount, "photoBytes": photoTotal, "attachmentBytesSent": sent,
                "droppedConnections": network.state.withLockedValue(\.drops),
                "uploadMilliseconds": Self.milliseconds(returned, uploaded), "firstPhotoMilliseconds": Self.milliseconds(returned, firstPhoto),
                "peakMemoryMB": Int(peak.rounded()), "memoryGrowthMB": growth,
            ],
            checks: [
                (
                    "every job reached the server with its photo (\(withPhotos.count) of \(Self.photoCount)), through \(network.state.withLockedValue(\.drops)) dropped connections",
                    withPhotos.count == Self.photoCount && network.state.withLockedValue(\.drops) == 2
                ),
                (
                    "bytes sent for photos: \(Self.megabytes(sent)) MB for \(Self.megabytes(photoTotal)) MB of photos (at most 1.1x)",
                    sent <= photoTotal * 11 / 10
                ),
                (
                    "the dispatcher saw all \(jobsShown) jobs before any photo, and downloaded only the one opened (\(heldBefore) before, \(heldAfter) after)",
                    jobsShown == Self.photoCount && heldBefore == 0 && heldAfter == 1 && openedIntact
                ),
                (
                    "no photo held whole: memory of this process (server and both phones) rose \(growth) MB, to \(Int(peak.rounded())) MB, "
                        + "while \(Self.megabytes(photoTotal)) MB of photos moved",
                    growth < Self.photoBytes * Self.photoCount / 1_000_000
                ),
            ],
            timelines: [.init(title: "worker", events: workerJournal), .init(title: "dispatcher", events: dispatcherJournal)]
        )
    }

    /// The worker finishes the jobs, a photo each; returns the photos' digests.
    private func finishJobs(on worker: FerryClient, photos: URL) async throws -> [String] {
        try FileManager.default.createDirectory(at: photos, withIntermediateDirectories: true)
        var digests: [String] = []
        for index in 1...Self.photoCount {
            let file = photos.appendingPathComponent("job-\(index).jpg")
            try Self.photo(seed: index).write(to: file)
            let digest = try await worker.store.attach(fileAt: file, contentType: "image/jpeg")
            try await worker.store.database.write { db in
                try db.execute(
                    sql: "INSERT INTO jobs (id, team_id, title, photo) VALUES (?, 'team-7', ?, ?)",
                    arguments: ["job-\(index)", "Job \(index) done", digest]
                )
            }
            digests.append(digest)
        }
        return digests
    }

    /// A photo's bytes: pseudo-random, the same for a seed.
    static func photo(seed: Int) -> Data {
        var state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15
        var words = [UInt64](repeating: 0, count: photoBytes / 8)
        for index in words.indices {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            words[index] = state ^ (state >> 29)
        }
        return words.withUnsafeBytes { Data($0) }
    }

    static func milliseconds(_ from: Date, _ to: Date) -> Int { Int((to.timeIntervalSince(from) * 1000).rounded()) }
    static func megabytes(_ bytes: Int) -> String { String(format: "%.1f", Double(bytes) / 1_000_000) }
}

/// The worker's network: off in the basement, and dropping connections in the middle of a
/// photo's upload when told (half its bytes reach the server, the answer never comes back).
struct FieldNetwork: SyncTransport {
    struct State {
        var online = true
        var dropsLeft = 0
        var drops = 0
        var attachmentBytes = 0
    }

    let base: any SyncTransport
    let state = NIOLockedValueBox(State())

    init(_ base: any SyncTransport) { self.base = base }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        guard state.withLockedValue(\.online) else { throw URLError(.notConnectedToInternet) }
        guard ["POST", "PATCH"].contains(request.method), request.path.hasPrefix(Endpoint.attachments), let body = request.body else {
            return try await base.send(request)
        }
        let drop = state.withLockedValue { state in
            let drop = body.count > 1 && state.dropsLeft > 0
            if drop { (state.dropsLeft, state.drops) = (state.dropsLeft - 1, state.drops + 1) }
            state.attachmentBytes += drop ? body.count / 2 : body.count
            return drop
        }
        guard drop else { return try await base.send(request) }
        var half = request
        half.body = body.prefix(body.count / 2)
        half.headers["Upload-Complete"] = "?0"
        _ = try await base.send(half)
        throw URLError(.networkConnectionLost)
    }

    func openStream(_ request: TransportRequest) async throws -> TransportStream {
        guard state.withLockedValue(\.online) else { throw URLError(.notConnectedToInternet) }
        return try await base.openStream(request)
    }
}
