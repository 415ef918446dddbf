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

    func pullUntilCaughtUp() async throws -> PullSummary {
        var summary = PullSummary()
        let meta = try await store.database.read { db in try Row.fetchOne(db, sql: "SELECT cursor, answered_through FROM ferry_meta") }
        var cursor: String? = meta?["cursor"]
        // This store's own writes the server answered are not sent back (PROTOCOL.md, "A
        // client's own writes"): the store holds them. Read once: only this sync's own push
        // raises it, and a lower bound leaves fewer out, never one too many.
        let answeredThrough: Int64 = meta?["answered_through"] ?? 0
        // While one page is written locally, the next is fetched and decoded, so the network,
        // the server and the local database work at the same time. Pages are still written
        // one at a time and in order, each in one transaction with its own cursor.
        var writing: Task<PageOutcome, any Error>?
        var journaled = 0
        do {
            while true {
                let fetched = try await fetchPage(after: cursor, answeredThrough: answeredThrough)
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
    private func fetchPage(after cursor: String?, answeredThrough: Int64) async throws -> PullResponse? {
        var path = "/v1/pull?limit=\(pageSize)&answeredThrough=\(answeredThrough)"
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
                    kind: "pull.setAside",
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
