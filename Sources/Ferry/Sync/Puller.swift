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
    let connection: SyncConnection
    let status: StatusCenter
    let pageSize: Int

    func pullUntilCaughtUp() async throws -> PullSummary {
        var summary = PullSummary()
        let decoder = JSONDecoder()
        while true {
            let cursor = try await store.database.read { db in try String.fetchOne(db, sql: "SELECT cursor FROM ferry_meta") }
            var path = "/v1/pull?limit=\(pageSize)"
            if let cursor { path += "&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)" }
            let response = try await connection.send(TransportRequest(method: "GET", path: path))
            summary.requests += 1
            guard response.status == 200 else {
                if response.status == 400, (try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body))?.code == .invalidCursor {
                    // The server no longer knows our position: start over; pages are idempotent.
                    try await store.database.write { db in try db.execute(sql: "UPDATE ferry_meta SET cursor = NULL") }
                    continue
                }
                throw FerryError.protocolViolation("pull answered \(response.status): \(SyncConnection.message(in: response))")
            }
            let page: PullResponse
            do {
                page = try decoder.decode(PullResponse.self, from: response.body)
            } catch {
                throw FerryError.protocolViolation("pull response is not valid: \(error)")
            }
            summary.received += page.changes.count
            summary.applied += try await apply(page)
            await status.update { $0.phase = .downloading(received: summary.received) }
            if !page.hasMore { return summary }
        }
    }

    /// Applies one page and saves its cursor; returns how many changes were written locally.
    private func apply(_ page: PullResponse) async throws -> Int {
        try await store.database.write { db in
            var writer = RecordWriter(store: store)
            var applied = 0
            let queued = try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM ferry_outbox WHERE entity = ? AND entity_id = ? AND state != ?)")
            let known = try db.cachedStatement(sql: "SELECT version FROM ferry_versions WHERE entity = ? AND entity_id = ?")
            let remember = try db.cachedStatement(sql: "INSERT INTO ferry_versions (entity, entity_id, version) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET version = excluded.version")
            try FerryStore.withoutCapture(db) {
                for change in page.changes {
                    // Our own upload coming back, or a record already this new: nothing to do.
                    if let version = try Int64.fetchOne(known, arguments: [change.entity, change.entityID]), version >= change.version { continue }
                    if try Bool.fetchOne(queued, arguments: [change.entity, change.entityID, OutboxState.deadLettered.rawValue]) == true { continue }
                    try writer.write(
                        entity: change.entity, entityID: change.entityID,
                        data: change.op == .delete ? nil : (change.data ?? [:]), naturalKey: change.naturalKey, db: db
                    )
                    try remember.execute(arguments: [change.entity, change.entityID, change.version])
                    applied += 1
                }
            }
            try db.execute(sql: "UPDATE ferry_meta SET cursor = ?", arguments: [page.cursor])
            return applied
        }
    }
}

/// Totals of one pull.
public struct PullSummary: Sendable, Equatable {
    public var requests = 0
    public var received = 0
    /// Changes written locally (received minus those skipped for queued local edits).
    public var applied = 0

    public init() {}
}
