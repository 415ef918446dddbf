import Crypto
import Ferry
import FerryProtocol
import FerryServer
import Foundation
import GRDB

/// `ferry bench --only attachments`: photos and files through a `ferry serve` child process
/// (PROTOCOL.md, "Attachments"), on its folder store and, given `--attachments s3://…`, on an
/// S3-compatible bucket:
/// - one large file up and down, in MB/s against the floor of the same bytes copied between two
///   files and hashed on this machine, with the peak memory of client and server;
/// - many photos: the time from the network's return to the last on the server, and the requests;
/// - text edits queued beside a large upload: when they reach the server, against without it.
struct AttachmentBench {
    var bytes: Int64 = 1 << 30
    var photos = 500
    var photoBytes = 2_000_000
    /// `--attachments` for the server besides its folder: an `s3://…` URL (keys from the environment).
    var stores: [String] = []
    var transport: @Sendable (URL) -> any SyncTransport

    func run(in folder: URL) async throws -> [String] {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let source = folder.appendingPathComponent("large.bin")
        try Self.write(bytes, to: source)
        let floor = try Self.floor(source, in: folder)
        var lines = [String(format: "attachments: the floor, %.0f MB copied file to file and hashed: %.0f MB/s", Double(bytes) / 1e6, floor)]
        for store in ["file:" + folder.appendingPathComponent("server-blobs").path] + stores {
            let server = try ServerProcess(
                arguments: [
                    "serve", "--database", "sqlite:" + folder.appendingPathComponent("server-\(lines.count).sqlite").path, "--port", "0",
                    "--jwt-secret", Self.secret, "--rate-limit", "off", "--attachments", store, "--max-attachment-bytes", "\(max(bytes, 1 << 20))",
                ],
                log: folder.appendingPathComponent("serve-attachments-\(lines.count).log")
            )
            defer { server.stop() }
            let endpoint = URL(string: "http://127.0.0.1:\(try await server.port())")!
            let kind = store.hasPrefix("s3:") ? "s3" : "file"
            lines += try await largeFile(
                source,
                floor: floor,
                server: server,
                endpoint: endpoint,
                kind: kind,
                in: folder.appendingPathComponent("large-\(kind)")
            )
            if kind == "file" {
                lines.append(try await manyPhotos(endpoint: endpoint, in: folder.appendingPathComponent("photos")))
                lines.append(try await editsBesideUpload(endpoint: endpoint, in: folder.appendingPathComponent("beside")))
            }
        }
        return lines
    }

    static let secret = TokenAuthority.randomSecret()
    static let jobs = SyncedTable(table: "jobs", attachments: ["photo"])

    private func client(_ user: String, _ path: URL, endpoint: URL) async throws -> FerryClient {
        try FileManager.default.createDirectory(at: path.deletingLastPathComponent(), withIntermediateDirectories: true)
        var schema = DatabaseMigrator()
        schema.registerMigration("bench-jobs") { db in
            try db.execute(sql: "CREATE TABLE jobs (id TEXT PRIMARY KEY NOT NULL, title TEXT, photo TEXT)")
        }
        let store = try FerryStore(path: path.path, schema: schema, tables: [Self.jobs])
        let token = try await TokenAuthority(secret: Self.secret).issue(userID: user, ttl: .seconds(7200))
        return FerryClient(store: store, transport: transport(endpoint), token: { token })
    }

    /// One large file up and down.
    private func largeFile(_ source: URL, floor: Double, server: ServerProcess, endpoint: URL, kind: String, in folder: URL) async throws -> [String]
    {
        let user = "large-\(UUID().uuidString.prefix(6))"
        let sender = try await client(user, folder.appendingPathComponent("sender.sqlite"), endpoint: endpoint)
        let digest = try await sender.store.attach(fileAt: source)
        try await sender.store.database.write { db in try db.execute(sql: "INSERT INTO jobs (id, photo) VALUES ('big', ?)", arguments: [digest]) }
        PeakMemory.reset()
        server.resetPeakMemory()
        let started = ContinuousClock.now
        try await sender.sync()
        let up = started.duration(to: .now).seconds
        let (clientUp, serverUp) = (PeakMemory.megabytes() ?? 0, server.peakMemoryMB ?? 0)
        let receiver = try await client(user, folder.appendingPathComponent("receiver.sqlite"), endpoint: endpoint)
        try await receiver.sync()
        PeakMemory.reset()
        server.resetPeakMemory()
        let fetching = ContinuousClock.now
        let file = try await receiver.attachment(digest)
        let down = fetching.duration(to: .now).seconds
        let (clientDown, serverDown) = (PeakMemory.megabytes() ?? 0, server.peakMemoryMB ?? 0)
        guard try Self.digest(of: file) == digest else { throw CommandFailure("the downloaded bytes differ from the uploaded ones") }
        let megabytes = Double(bytes) / 1e6
        return [
            String(
                format: "  %@ upload, %.0f MB: %.1f s, %.0f MB/s (%.1fx the floor's time); peak memory client %.0f MB, server %.0f MB",
                kind,
                megabytes,
                up,
                megabytes / up,
                floor / (megabytes / up),
                clientUp,
                serverUp
            ),
            String(
                format: "  %@ download, %.0f MB: %.1f s, %.0f MB/s (%.1fx the floor's time); peak memory client %.0f MB, server %.0f MB",
                kind,
                megabytes,
                down,
                megabytes / down,
                floor / (megabytes / down),
                clientDown,
                serverDown
            ),
        ]
    }

    /// Many photos taken offline, sent when the network returns.
    private func manyPhotos(endpoint: URL, in folder: URL) async throws -> String {
        let worker = try await client("photos-\(UUID().uuidString.prefix(6))", folder.appendingPathComponent("worker.sqlite"), endpoint: endpoint)
        let camera = folder.appendingPathComponent("camera")
        try FileManager.default.createDirectory(at: camera, withIntermediateDirectories: true)
        for index in 0..<photos {
            let file = camera.appendingPathComponent("\(index).jpg")
            try Self.write(Int64(photoBytes), to: file, seed: UInt64(index + 1))
            let digest = try await worker.store.attach(fileAt: file)
            try FileManager.default.removeItem(at: file)
            try await worker.store.database.write { db in
                try db.execute(sql: "INSERT INTO jobs (id, photo) VALUES (?, ?)", arguments: ["job-\(index)", digest])
            }
        }
        let started = ContinuousClock.now
        let report = try await worker.sync()
        let seconds = started.duration(to: .now).seconds
        return String(
            format: "  %d photos of %.0f MB: on the server %.1f s after the network's return (%.0f MB/s), %d requests, %d jobs acknowledged",
            photos,
            Double(photoBytes) / 1e6,
            seconds,
            Double(photos * photoBytes) / 1e6 / seconds,
            report.requests,
            report.upload.acknowledged
        )
    }

    /// 100 text edits queued after a 50 MB photo: when the last reaches the server, with and without the photo.
    private func editsBesideUpload(endpoint: URL, in folder: URL) async throws -> String {
        var times: [Double] = []
        for withPhoto in [false, true] {
            let device = try await client(
                "beside-\(UUID().uuidString.prefix(6))",
                folder.appendingPathComponent("\(withPhoto).sqlite"),
                endpoint: endpoint
            )
            if withPhoto {
                let file = folder.appendingPathComponent("video.bin")
                try Self.write(50_000_000, to: file, seed: 99)
                let digest = try await device.store.attach(fileAt: file)
                try await device.store.database.write { db in
                    try db.execute(sql: "INSERT INTO jobs (id, photo) VALUES ('video', ?)", arguments: [digest])
                }
            }
            try await device.store.database.write { db in
                for index in 0..<100 { try db.execute(sql: "INSERT INTO jobs (id, title) VALUES (?, 'text')", arguments: ["edit-\(index)"]) }
            }
            let started = Date()
            try await device.sync()
            // The edits' answer, from the journal: the first push answered.
            let answered = try await device.journal.events().first { $0[.path] == Endpoint.push && $0[.status] == "200" && $0.at >= started }
            times.append((answered?.at ?? Date()).timeIntervalSince(started) * 1000)
        }
        return String(format: "  100 text edits reach the server in %.0f ms alone, %.0f ms beside a 50 MB upload", times[0], times[1])
    }

    /// The floor: the file's bytes copied to another file and hashed, a MiB at a time, in MB/s.
    static func floor(_ source: URL, in folder: URL) throws -> Double {
        let copy = folder.appendingPathComponent("floor.bin")
        _ = FileManager.default.createFile(atPath: copy.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: copy) }
        let started = ContinuousClock.now
        let input = try FileHandle(forReadingFrom: source)
        let output = try FileHandle(forWritingTo: copy)
        var hash = SHA256()
        var total = 0
        while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
            hash.update(data: chunk)
            try output.write(contentsOf: chunk)
            total += chunk.count
        }
        try output.synchronize()
        _ = hash.finalize()
        try input.close()
        try output.close()
        return Double(total) / 1e6 / started.duration(to: .now).seconds
    }

    /// The digest of a file's bytes, read a MiB at a time.
    static func digest(of file: URL) throws -> String {
        let input = try FileHandle(forReadingFrom: file)
        defer { try? input.close() }
        var hash = SHA256()
        while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty { hash.update(data: chunk) }
        return AttachmentDigest(sha256: hash.finalize()).description
    }

    /// `count` pseudo-random bytes (a repeatable stream per seed) into `file`, a MiB at a time.
    static func write(_ count: Int64, to file: URL, seed: UInt64 = 1) throws {
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let output = try FileHandle(forWritingTo: file)
        defer { try? output.close() }
        var state = seed &* 0x9E37_79B9_7F4A_7C15
        var left = count
        while left > 0 {
            let words = Int(min(left, 1 << 20) + 7) / 8
            var block = [UInt64](repeating: 0, count: words)
            for index in block.indices {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                block[index] = state ^ (state >> 29)
            }
            let data = block.withUnsafeBytes { Data($0.prefix(Int(min(left, 1 << 20)))) }
            try output.write(contentsOf: data)
            left -= Int64(data.count)
        }
    }
}
