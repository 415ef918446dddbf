import ConcurrencyExtras
import Ferry
import FerryTestSupport
import Foundation
import GRDB

/// One seeded run of photos under the pressure that loses them (issue 50): two phones of one
/// user attach photos whose camera files are then gone, sync through pushes that fail while
/// uploads go through, fetch each other's photos into caches far too small for them (eviction),
/// replace and delete photos, and the server's janitor sweeps as if a day had passed, again and
/// again. The invariant, once the network is back and each phone synced: no photo is lost while
/// a device still holds it. Every record the server holds serves its photo's true bytes; every
/// photo a phone's row, queued change or dead letter names is on that phone or on the server;
/// and no change was set aside for a photo "the store has no file of".
struct PhotoFaultSchedule {
    let seed: UInt64

    struct Phone {
        let name: String
        let store: FerryStore
        let client: FerryClient
    }

    static func table() -> SyncedTable { SyncedTable(table: "shots", attachments: ["photo"]) }

    static func openStore() throws -> FerryStore {
        var schema = DatabaseMigrator()
        schema.registerMigration("shots-v1") { db in
            try db.execute(sql: "CREATE TABLE shots (id TEXT PRIMARY KEY NOT NULL, photo TEXT)")
        }
        return try FerryStore(path: ClientFixture.storePath(), schema: schema, tables: [table()])
    }

    func play() async throws -> [String] {
        try await TestServer.run { [seed] server in
            var random = JitterGenerator(seed: seed)
            let failingFirst = Bool.random(using: &random)
            let pushesFail = LockIsolated(failingFirst)
            var configuration = SyncConfiguration()
            configuration.attachmentChunkBytes = 64 * 1024
            configuration.attachmentCacheBytes = 250_000  // two photos at most: every fetch evicts
            var phones: [Phone] = []
            for name in ["phone", "tablet"] {
                let transport = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                    if pushesFail.value, request.path == "/v1/push" {
                        return TransportResponse(status: 503, headers: ["Retry-After": "0"], body: Data())
                    }
                    return try await next(request)
                }
                let store = try Self.openStore()
                phones.append(
                    Phone(
                        name: name,
                        store: store,
                        client: ClientFixture.client(store: store, server: server, transport: transport, configuration: configuration)
                    )
                )
            }
            var day = Date()
            var counter = 0
            var taken: [String: Data] = [:]
            for _ in 0..<(16 + Int.random(in: 0..<24, using: &random)) {
                let phone = phones[Int.random(in: 0..<phones.count, using: &random)]
                switch Int.random(in: 0..<100, using: &random) {
                case ..<30:
                    // A photo taken: the camera's file is gone once it is attached.
                    counter += 1
                    let size = 40_000 + Int.random(in: 0..<100_000, using: &random)
                    let (url, bytes) = try AttachmentSyncTests.photo(size, seed: UInt8(truncatingIfNeeded: seed &* 31 &+ UInt64(counter)))
                    let digest = try await phone.store.attach(fileAt: url)
                    taken[digest] = bytes
                    try FileManager.default.removeItem(at: url)
                    let existing = try await phone.store.database.read { db in try String.fetchAll(db, sql: "SELECT id FROM shots ORDER BY id") }
                    let id =
                        existing.isEmpty || Bool.random(using: &random)
                        ? "\(phone.name)-\(counter)" : existing[Int.random(in: 0..<existing.count, using: &random)]
                    try await phone.store.database.write { db in
                        try db.execute(
                            sql: "INSERT INTO shots (id, photo) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET photo = excluded.photo",
                            arguments: [id, digest]
                        )
                    }
                case ..<38:
                    try await phone.store.database.write { db in
                        try db.execute(sql: "DELETE FROM shots WHERE id = (SELECT id FROM shots ORDER BY random() LIMIT 1)")
                    }
                case ..<60:
                    _ = try? await phone.client.sync()
                case ..<80:
                    // Photos opened: the cache evicts others to make room.
                    let digests = try await phone.store.database.read { db in
                        try String.fetchAll(db, sql: "SELECT photo FROM shots WHERE photo IS NOT NULL")
                    }
                    if let digest = digests.randomElement(using: &random) { _ = try? await phone.client.attachment(digest) }
                case ..<90:
                    day = day.addingTimeInterval(2 * 86_400)
                    await server.sweepAttachments(asOf: day)
                default:
                    pushesFail.withValue { $0.toggle() }
                }
            }
            pushesFail.setValue(false)
            for _ in 0..<2 {
                for phone in phones { _ = try? await phone.client.sync() }
            }
            return try await problems(phones: phones, server: server, taken: taken)
        }
    }

    /// What the invariant finds wrong.
    func problems(phones: [Phone], server: TestServer, taken: [String: Data]) async throws -> [String] {
        var problems: [String] = []
        let token = try await TestServer.token(for: "alice")
        for (record, change) in try await server.pullAll(token: token) {
            guard case .string(let digest)? = change.data?["photo"] else { continue }
            let reply = try await server.send(.GET, "/v1/attachments/\(digest)", token: token)
            if reply.status != 200 || reply.body != taken[digest] {
                problems.append("\(record) on the server names \(digest.suffix(8)), which the server answers \(reply.status)")
            }
        }
        for phone in phones {
            for letter in try await phone.client.deadLetters() {
                problems.append("\(phone.name): \(letter.entity)/\(letter.entityID) was set aside: \(letter.reason)")
            }
            let named = try await phone.store.database.read { db in
                try String.fetchAll(db, sql: "SELECT photo FROM shots WHERE photo IS NOT NULL")
            }
            for digest in Set(named) where phone.store.localAttachment(digest) == nil {
                if try await server.send(.HEAD, "/v1/attachments/\(digest)", token: token).status != 200 {
                    problems.append("\(phone.name): a row names \(digest.suffix(8)), which neither the phone nor the server holds")
                }
            }
        }
        return problems
    }
}
