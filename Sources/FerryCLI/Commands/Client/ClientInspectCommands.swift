import ArgumentParser
import Ferry
import FerryDiagnostics
import FerryProtocol
import Foundation
import GRDB

struct ClientStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Pending and dead-lettered changes, and the last sync.")

    @OptionGroup var options: StoreOptions
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let store = try options.open()
        let client = FerryClient(store: store, transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1")!), token: { "" })
        let status = await client.statusUpdates().first { _ in true } ?? SyncStatus()
        let lastSynced = status.lastSyncedAt.map { ISO8601DateFormatter().string(from: $0) }
        if json {
            let output: [String: JSONValue] = [
                "pending": .integer(Int64(status.pending)), "deadLettered": .integer(Int64(status.deadLettered)),
                "lastSyncedAt": lastSynced.map { .string($0) } ?? .null, "clientID": .string(store.clientID),
            ]
            printNow(String(decoding: try ProtocolValidation.encode(output), as: UTF8.self))
        } else {
            printNow(
                "pending: \(status.pending)\ndeadLettered: \(status.deadLettered)\nlastSyncedAt: \(lastSynced ?? "never")\nclientID: \(store.clientID)"
            )
        }
    }
}

struct ClientListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "The local records of an entity.")

    @OptionGroup var options: StoreOptions
    @Option(help: "Entity name.") var entity: String
    @Option(help: "Only the records of this space.") var space: String?
    @Flag(help: "Print JSON lines.") var json = false

    struct Record: Encodable {
        var entityID: String
        var version: Int64?
        var data: JSONObject
        var naturalKey: String?
        /// Absent for a record of the personal space.
        var space: String?

        enum CodingKeys: String, CodingKey { case entityID, version, data, naturalKey, space }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(entityID, forKey: .entityID)
            try container.encode(version, forKey: .version)
            try container.encode(data, forKey: .data)
            try container.encode(naturalKey, forKey: .naturalKey)
            try container.encodeIfPresent(space, forKey: .space)
        }
    }

    func run() async throws {
        if let problem = ProtocolValidation.entityProblem(entity) { throw CommandFailure("--entity: \(problem)") }
        try validateSpace(space)
        let store = try options.open()
        let rows = try await store.database.read { [entity, space] db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT r.id, r.data, r.natural_key, \(KnownVersions.versionSQL(entity: "r.entity", entityID: "r.id")), r.space FROM records r
                    WHERE r.entity = ? AND (?2 IS NULL OR r.space = ?2) ORDER BY r.id
                    """,
                arguments: [entity, space]
            ).map { ($0[0] as String, $0[1] as String, $0[2] as String?, $0[3] as Int64?, $0[4] as String?) }
        }
        let encoder = JSONEncoder.sortedKeys()
        for (id, data, naturalKey, version, space) in rows {
            let object = (try? JSONDecoder().decode(JSONObject.self, from: Data(data.utf8))) ?? [:]
            if json {
                let record = Record(entityID: id, version: version, data: object, naturalKey: naturalKey, space: space)
                printNow(String(decoding: try encoder.encode(record), as: UTF8.self))
            } else {
                printNow(
                    "\(id)\tv\(version.map(String.init) ?? "-")\t\(data)\(naturalKey.map { "\tkey \($0)" } ?? "")\(space.map { "\tspace \($0)" } ?? "")"
                )
            }
        }
    }
}

struct ClientJournalCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "journal",
        abstract: "The sync journal as JSON lines, or as a timeline page (--html).",
        discussion: "Reads the store without changing it, so an app that has it open goes on as it was."
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "Write the journal as one self-contained HTML page (a timeline per episode, every event in a table) to this file.")
    var html: String?
    @Option(help: "How many of the newest events to read (1 to 1000000).") var limit = 10_000

    func validate() throws {
        guard (1...1_000_000).contains(limit) else { throw ValidationError("--limit must be 1 to 1000000, not \(limit)") }
        if let html { try validatePagePath(html, option: "--html") }
    }

    func run() async throws {
        let file = try options.existingStore()
        if let html {
            let page = URL(fileURLWithPath: html).standardizedFileURL.resolvingSymlinksInPath().path
            let store = file.standardizedFileURL.resolvingSymlinksInPath().path
            guard ![store, store + "-wal", store + "-shm"].contains(page) else {
                throw CommandFailure("--html \(html) is the store itself; name another file for the page")
            }
        }
        let events: [JournalEvent]
        do {
            events = try Journal.events(atPath: file.path, limit: limit)
        } catch let error as FerryError {
            throw CommandFailure("\(error)")
        } catch {
            throw CommandFailure("cannot read the journal of \(file.path): \(error); nothing in it was changed")
        }
        guard let html else {
            if !events.isEmpty { printNow(try Journal.jsonLines(of: events)) }
            return
        }
        let page = JournalTimeline(title: "Ferry sync timeline: \(options.user)", tracks: [.init(title: options.user, events: events)]).html()
        try writePage(page, to: html)
        printNow("wrote \(html): \(events.count) events of \(options.user)")
    }
}
