import FerryProtocol
import Foundation
import GRDB

/// One thing that happened during sync and why, as a person debugging would want it.
public struct JournalEvent: Sendable, Codable, Equatable {
    /// When it happened; the journal keeps it to the millisecond.
    public var at: Date
    /// What kind of thing happened (``Kind``): `run.started`, `run.finished`, `request`, `wait`, …
    public var kind: Kind
    /// What happened, in a line for people: `POST /v1/push → 200`, `sync failed: …`.
    public var message: String
    /// Particulars by name, such as `run`, `status`, `ms` or `attempt`; empty if there are none.
    public var details: [String: String]

    /// An event; `at` defaults to now.
    public init(at: Date = Date(), kind: Kind, message: String, details: [JournalDetail: String] = [:]) {
        self.init(at: at, kind: kind, message: message, details: Dictionary(uniqueKeysWithValues: details.map { ($0.key.name, $0.value) }))
    }

    /// An event with details by name, as read back from an export; write new events with
    /// `JournalDetail` names.
    public init(at: Date = Date(), kind: Kind, message: String, details: [String: String]) {
        self.at = at
        self.kind = kind
        self.message = message
        self.details = details
    }
}

extension JournalEvent {
    /// The progress a status observer was shown, in its words (`Synced 500 of 1,000 (50%)`),
    /// with the counts as `done` and, while uploading, `total`.
    static func progress(_ phase: SyncStatus.Phase) -> JournalEvent {
        let details: [JournalDetail: String] =
            switch phase {
            case .uploading(let done, let total): [.done: "\(done)", .total: "\(total)"]
            case .downloading(let received): [.done: "\(received)"]
            default: [:]
            }
        return JournalEvent(kind: .progress, message: SyncStatus(phase: phase).progressText, details: details)
    }
}

/// The store's journal: structured events kept in the database and exported as JSON lines.
/// It keeps the latest `capacity` events; older ones are dropped as new ones come. The
/// `FerryDiagnostics` product draws them as an HTML page (`JournalTimeline`) for a support screen.
public struct Journal: Sendable {
    let database: DatabasePool
    /// How many events are kept; at least 1.
    public let capacity: Int

    /// The journal of `store`, keeping the latest `capacity` events (10,000 by default, at least 1).
    package init(store: FerryStore, capacity: Int = 10_000) {
        self.database = store.database
        self.capacity = max(1, capacity)
    }

    /// Appends `event` and drops the events beyond `capacity`. It never fails a sync: an event that cannot be
    /// encoded or written is lost, not thrown.
    public func record(_ event: JournalEvent) async {
        guard let text = try? String(decoding: JSONEncoder.journal.encode(event), as: UTF8.self) else { return }
        // The journal must never fail a sync: a line that cannot be written is lost, not thrown.
        try? await database.write { [capacity] db in
            try db.execute(sql: "INSERT INTO ferry_journal (at, event) VALUES (?, ?)", arguments: [event.at.timeIntervalSince1970, text])
            try db.execute(sql: "DELETE FROM ferry_journal WHERE id <= ?", arguments: [db.lastInsertedRowID - Int64(capacity)])
        }
    }

    /// The most recent `limit` events, in the order they happened (an event stamped when it
    /// happened may be written a little later, behind events that came after it).
    public func events(limit: Int = 10_000) async throws -> [JournalEvent] {
        try await database.read { db in try Self.events(limit: limit, db: db) }
    }

    /// The most recent `limit` events of the store file at `path`, in the order they happened,
    /// read without changing a byte of it (see ``QueueSnapshot/read(from:)``).
    ///
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store.
    public static func events(atPath path: String, limit: Int = 10_000) throws -> [JournalEvent] {
        try FerryStore.readFile(atPath: path) { db in try events(limit: limit, db: db) }
    }

    /// The most recent `limit` events of `db`'s journal, in the order they happened.
    static func events(limit: Int, db: Database) throws -> [JournalEvent] {
        let lines = try String.fetchAll(
            db,
            sql: "SELECT event FROM (SELECT id, at, event FROM ferry_journal ORDER BY id DESC LIMIT ?) ORDER BY at, id",
            arguments: [limit]
        )
        let decoder = Self.decoder()
        return try lines.map { try decoder.decode(JournalEvent.self, from: Data($0.utf8)) }
    }

    /// The newest event of `kind` in the whole journal.
    static func latest(kind: JournalEvent.Kind, db: Database) throws -> JournalEvent? {
        try String.fetchOne(
            db,
            sql: "SELECT event FROM ferry_journal WHERE json_extract(event, '$.kind') = ? ORDER BY id DESC LIMIT 1",
            arguments: [kind.rawValue]
        )
        .map { try decoder().decode(JournalEvent.self, from: Data($0.utf8)) }
    }

    /// Reads the journal's times, ISO 8601 with milliseconds.
    private static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = try? journalTime.parse(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 time: \(text)"))
            }
            return date
        }
        return decoder
    }

    /// The journal as JSON lines, one event a line, in the order they happened.
    public func jsonLines(limit: Int = 10_000) async throws -> String {
        try Self.jsonLines(of: await events(limit: limit))
    }

    /// `events` as JSON lines, one event a line, as the journal stores them.
    public static func jsonLines(of events: [JournalEvent]) throws -> String {
        let encoder = JSONEncoder.journal
        return try events.map { String(decoding: try encoder.encode($0), as: UTF8.self) }.joined(separator: "\n")
    }
}

extension JSONEncoder {
    static var journal: JSONEncoder {
        let encoder = JSONEncoder.sortedKeys()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(journalTime.format(date))
        }
        return encoder
    }
}

/// ISO 8601 with milliseconds: a launch storm happens within 100 ms.
private let journalTime = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
