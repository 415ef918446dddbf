import FerryProtocol
import Foundation
import GRDB

/// Brings the server's changes down, one transaction per page.
///
/// Pulled rows are written with change capture off, so they are never echoed
/// back; a record with local changes still queued keeps its local state (the
/// queued change will reach the server and come back); the cursor is saved in
/// the same transaction as the rows it covers.
struct Puller: Sendable {
    let store: FerryStore
    /// Confirmed with every page written: a client that lost it writes nothing more.
    let lease: SyncLease
    let connection: SyncConnection
    let status: StatusCenter
    let pageSize: Int
    /// A pull from scratch that brings every record, this store's own writes too.
    var fromScratch = false

    /// `ids` (ascending) as the protocol's `answered`: `3-5500,5502`, at most
    /// `maxAnsweredRanges` ranges (the ones after are sent back: more traffic, nothing lost).
    static func ranges(_ ids: [Int64]) -> String {
        var ranges: [ClosedRange<Int64>] = []
        for id in ids {
            if let last = ranges.last, last.upperBound + 1 == id {
                ranges[ranges.count - 1] = last.lowerBound...id
            } else {
                guard ranges.count < maxAnsweredRanges else { break }
                ranges.append(id...id)
            }
        }
        return ranges.map { $0.count == 1 ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ",")
    }

    /// At most this many ranges in a pull's `answered` (the protocol's limit is 1,000; a few
    /// hundred keep the request line a few kilobytes).
    static let maxAnsweredRanges = 300

    func pullUntilCaughtUp() async throws -> PullSummary {
        var summary = PullSummary()
        // This store's own writes the server answered do not come back (PROTOCOL.md, "A
        // client's own writes"): the pull names them, under the client id they were answered
        // to, read with them (another process on the store may have taken a new one). A pull
        // from scratch names none: it brings everything.
        let (savedCursor, clientID, answered) = try await store.database.read { db in
            (
                try String.fetchOne(db, sql: "SELECT cursor FROM ferry_meta"),
                try String.fetchOne(db, sql: "SELECT client_id FROM ferry_meta"),
                try Int64.fetchAll(db, sql: "SELECT id FROM ferry_answered ORDER BY id")
            )
        }
        var cursor = savedCursor
        if let clientID { store.identity.clientID = clientID }
        let ranges = fromScratch ? "" : Self.ranges(answered)
        // While one page is written locally, the next is fetched and decoded, so the network,
        // the server and the local database work at the same time. Pages are still written
        // one at a time and in order, each in one transaction with its own cursor.
        var writing: Task<PageOutcome, any Error>?
        var journaled = 0
        do {
            while true {
                let fetched = try await fetchPage(after: cursor, answered: ranges)
                summary.requests += 1
                if let written = try await writing?.value { await count(written, into: &summary) }
                writing = nil
                guard let page = fetched else {
                    // The server no longer knows our position: start over; pages are idempotent.
                    try await store.database.write { db in try db.execute(sql: "UPDATE ferry_meta SET cursor = NULL") }
                    cursor = nil
                    continue
                }
                writing = Task { try await apply(page) }
                summary.received += page.changes.count
                let phase = SyncStatus.Phase.downloading(received: summary.received)
                await status.update { $0.phase = phase }
                // The journal gets the words the status shows each time the count doubles, and
                // the last: a long pull is a few lines, not one a page.
                if summary.received >= 2 * max(journaled, 1) || (!page.hasMore && summary.received > journaled) {
                    journaled = summary.received
                    await connection.journal.record(.progress(phase))
                }
                if !page.hasMore { break }
                cursor = page.cursor
            }
            if let written = try await writing?.value { await count(written, into: &summary) }
            if let last = answered.last {
                // Caught up: the cursor is past every write named, so they are named no more.
                try await store.database.write { db in try db.execute(sql: "DELETE FROM ferry_answered WHERE id <= ?", arguments: [last]) }
            }
            let retried = try await retrySetAside()
            summary.applied += retried.applied
            summary.setAside = retried.refused.count
            return summary
        } catch {
            _ = try? await writing?.value  // the page being written commits or rolls back whole before we return
            throw error
        }
    }

    private func count(_ outcome: PageOutcome, into summary: inout PullSummary) async {
        summary.applied += outcome.applied
        await journal(outcome.refused)
    }

    /// One page after `cursor`; `nil` when the server refuses the cursor as unknown.
    private func fetchPage(after cursor: String?, answered: String) async throws -> PullResponse? {
        var path = "/v1/pull?limit=\(pageSize)"
        if !answered.isEmpty { path += "&answered=\(answered)" }
        if let cursor { path += "&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)" }
        let response = try await connection.send(TransportRequest(method: "GET", path: path))
        guard response.status == 200 else {
            if response.status == 400, (try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body))?.code == .invalidCursor { return nil }
            throw FerryError.protocolViolation("pull answered \(response.status): \(SyncConnection.message(in: response))")
        }
        do {
            return try PullResponse.decode(from: response.body)
        } catch {
            throw FerryError.protocolViolation("pull response is not valid: \(error)")
        }
    }

    /// Applies one page and saves its cursor; returns how many changes were written locally,
    /// and what the app's schema refused (set aside, `PulledRecords`). The cursor moves on
    /// whatever was refused: one record must not stop every pull after it.
    private func apply(_ page: PullResponse) async throws -> PageOutcome {
        try await store.database.write { db in
            try lease.confirm(db)
            var writer = RecordWriter(store: store)
            let records = page.changes.map { RecordRef(entity: $0.entity, entityID: $0.entityID) }
            let known = try KnownVersions.of(records, db: db)
            var learned = KnownVersions()
            let queued = try Outbox.queuedRecords(among: records, db: db)
            var news: [PulledRecords.Record] = []
            for (change, record) in zip(page.changes, records) {
                // Our own upload coming back, or a record already this new: nothing to do.
                if let version = known[record], version >= change.version { continue }
                if queued.contains(record) { continue }
                news.append(
                    PulledRecords.Record(
                        ref: record,
                        version: change.version,
                        data: change.op == .delete ? nil : (change.data ?? [:]),
                        naturalKey: change.naturalKey
                    )
                )
            }
            let outcome = try FerryStore.withoutCapture(db) { try PulledRecords.write(news, writer: &writer, db: db) }
            for record in outcome.written { learned.set(record.version, of: record.ref) }
            try learned.save(db: db)
            try PulledRecords.save(outcome, db: db)
            try db.execute(sql: "UPDATE ferry_meta SET cursor = ?", arguments: [page.cursor])
            return PageOutcome(applied: outcome.written.count, refused: outcome.refused.map { ($0.record.ref, $0.reason) })
        }
    }

    /// Tries the records set aside by this pull or earlier ones again, once the pull is caught up.
    private func retrySetAside() async throws -> PageOutcome {
        try await store.database.write { db in
            try lease.confirm(db)
            let outcome = try PulledRecords.retrySetAside(store: store, db: db)
            return PageOutcome(applied: outcome.written.count, refused: outcome.refused.map { ($0.record.ref, $0.reason) })
        }
    }

    /// Journals the records a page set aside.
    private func journal(_ refused: [(RecordRef, String)]) async {
        for (record, reason) in refused {
            await connection.journal.record(
                JournalEvent(
                    kind: .pullSetAside,
                    message: "pulled \(record.entity)/\(record.entityID) set aside: \(reason); it is tried again after every pull",
                    details: ["entity": record.entity, "entityID": record.entityID]
                )
            )
        }
    }
}

/// What writing one page did.
private struct PageOutcome: Sendable {
    var applied: Int
    var refused: [(RecordRef, String)]
}

/// Totals of one pull.
public struct PullSummary: Sendable, Equatable {
    /// Pages asked for, including one the server refused for an unknown cursor; retries are not counted.
    public var requests = 0
    /// Changes the server sent, including those skipped as already known or still queued locally.
    public var received = 0
    /// Changes written locally: received, less those skipped as already known or behind queued
    /// local edits, plus records set aside earlier that could now be written.
    public var applied = 0
    /// Records the app's schema refused that wait in the store after this pull, each journaled
    /// (`pull.setAside`) with why; they are tried again after every pull.
    public var setAside = 0

    /// Zero totals.
    public init() {}
}
