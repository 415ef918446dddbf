import Ferry
import FerryTestSupport
import Foundation
import GRDB

/// The fault schedule's photos: a table whose rows reference attachments, written on every
/// device, and the invariant they end in: every store's rows reference only attachments the
/// server serves to their user, and every file a store holds or fetches is the server's bytes.
enum SchedulePhotos {
    /// The laptop fetches photos with each pull; the phones only when one is opened.
    static func table(eager: Bool) -> SyncedTable {
        SyncedTable(table: "photos", attachments: ["photo"], attachmentDownloads: eager ? .eager : .lazy)
    }

    static func register(in schema: inout DatabaseMigrator) {
        schema.registerMigration("photos-v1") { db in
            try db.execute(sql: "CREATE TABLE photos (id TEXT PRIMARY KEY NOT NULL, caption TEXT, photo TEXT)")
        }
    }

    /// A photo of one of 40 contents, so devices and users attach the same bytes now and then;
    /// a few are empty, most a few chunks long.
    static func file(content: Int) throws -> URL {
        var generator = SplitMix(seed: UInt64(content) &+ 7_000)
        let size = content < 2 ? content * 3 : Int(generator.next() % 300_000)
        let bytes = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        let url = TestDirectory.make("schedule-photos").appendingPathComponent("photo-\(content).jpg")
        try bytes.write(to: url)
        return url
    }

    static func describe(caption: String?, photo: String?) -> String {
        "caption=\(caption ?? "null") photo=\(photo.map { String($0.suffix(8)) } ?? "null")"
    }

    static func localRows(_ db: Database) throws -> [String: String] {
        var rows: [String: String] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT id, caption, photo FROM photos") {
            rows["photos/\(row[0] as String)"] = describe(caption: row[1], photo: row[2])
        }
        return rows
    }

    /// What is wrong with the attachments `store`'s rows reference, with faults off: each must be
    /// served to `user` by the server, and the file the store holds (eager) or fetches now (lazy)
    /// must be the server's bytes. Returns how many attachments it checked too.
    static func problems(
        store: FerryStore,
        client: FerryClient,
        eager: Bool,
        server: String,
        token: String
    ) async throws -> (checked: Int, problems: [String]) {
        let references = try await store.database.read { db in
            try Row.fetchAll(db, sql: "SELECT id, photo FROM photos WHERE photo IS NOT NULL ORDER BY id").map { ($0[0] as String, $0[1] as String) }
        }
        let transport = URLSessionTransport(baseURL: URL(string: server)!)
        var problems: [String] = []
        var checked: Set<String> = []
        for (id, digest) in references where checked.insert(digest).inserted {
            let served = try await transport.send(
                TransportRequest(method: "GET", path: "/v1/attachments/\(digest)", headers: ["Authorization": "Bearer \(token)"])
            )
            guard served.status == 200 else {
                problems.append("photos/\(id) references \(digest), which the server does not serve to its user (\(served.status))")
                continue
            }
            let local: URL?
            if eager {
                local = store.localAttachment(digest)
                if local == nil { problems.append("photos/\(id): eager, yet \(digest) was not downloaded") }
            } else {
                do {
                    local = try await client.attachment(digest)
                } catch {
                    local = nil
                    problems.append("photos/\(id): \(digest) could not be fetched: \(error)")
                }
            }
            if let local, (try? Data(contentsOf: local)) != served.body {
                problems.append("photos/\(id): the store's file of \(digest) differs from the server's bytes")
            }
        }
        return (checked.count, problems)
    }

    /// Copies a store's attachment folder beside a copy of its database, as a backup of the
    /// app's container does; a file that vanishes meanwhile (a temporary one renamed) is skipped.
    static func copyFolder(of source: String, to target: String) throws {
        let from = URL(fileURLWithPath: source + ".attachments")
        let to = URL(fileURLWithPath: target + ".attachments")
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: from.path) else { return }
        try FileManager.default.createDirectory(at: to, withIntermediateDirectories: true)
        for name in names {
            try? FileManager.default.copyItem(at: from.appendingPathComponent(name), to: to.appendingPathComponent(name))
        }
    }
}
