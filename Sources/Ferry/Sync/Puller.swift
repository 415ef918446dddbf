import FerryProtocol
import Foundation
import GRDB

/// Brings the server's changes down, one transaction per page.
///
/// Pulled rows are written with change capture off, so they are never echoed
/// back; a record with local changes still queued keeps its local state (the
/// queued change will reach the server and come back); the cursor is saved in
/// the same transaction as the rows it covers.
///
/// **From scratch.** A pull without a cursor brings every live record and no tombstone. On a
/// store that holds records (its cursor refused after the server purged what it needed or was
/// restored from a backup, or a full sync) it is a pull *from scratch*: it takes every record
/// as the server sends it (the server's versions may have gone back), notes each one in
/// `ferry_scratch_seen` (which survives a relaunch mid-pull), and once caught up removes the
/// records it did not bring back, except those with changes still queued (or set aside as dead
/// letters): deleted meanwhile, or lost by the server's restore.
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
    /// `maxAnsweredRanges` ranges (the ones after are sent back: more traffic, nothing lost),
    /// and always the highest id: a server that no longer has it (restored from a backup)
    /// answers `cursor_expired`, and this store starts over instead of keeping writes the
    /// server lost.
    static func ranges(_ ids: [Int64]) -> String {
        var ranges: [ClosedRange<Int64>] = []
        for id in ids {
            if let last = ranges.last, last.upperBound + 1 == id {
                ranges[ranges.count - 1] = last.lowerBound...id
            } else {
                guard ranges.count < maxAnsweredRanges else {
                    if let highest = ids.last { ranges.append(highest...highest) }
                    break
                }
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
        let (position, clientID, answered, leftOutBy) = try await store.database.read { db in
            (
                try StoreMeta.pullPosition(db),
                try StoreMeta.clientID(db),
                try AnsweredWrites.all(db),
                try StoreMeta.leftOutBy(db)
            )
        }
        if let clientID { store.identity.clientID = clientID }
        var (cursor, scratch) = try await start(at: position, answered: answered, leftOutBy: leftOutBy)
        var ranges = scratch || fromScratch ? "" : Self.ranges(answered)
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
                guard case .page(let page, let leftOut) = fetched else {
                    // The server no longer knows our position, or no longer has what it needs to go
                    // on from it: start over from scratch; pages are idempotent.
                    if case .refused(let reason) = fetched { scratch = try await beginFromScratch(.refused(reason)) }
                    cursor = nil
                    ranges = ""
                    continue
                }
                writing = Task { [scratch] in try await apply(page, fromScratch: scratch, leftOut: leftOut) }
                summary.received += page.changes.count
                if let spaces = page.spaces, spaces != summary.spaces {
                    summary.spaces = spaces
                    await status.update { $0.spaces = spaces }
                }
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
            if scratch { try await sweep() }
            try await finishJoins()
            if let last = answered.last {
                // Caught up: the cursor is past every write named, so they are named no more.
                try await store.database.write { db in try AnsweredWrites.forget(through: last, db: db) }
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
        for membership in outcome.spaces.joined {
            await connection.journal.record(
                JournalEvent(
                    kind: .spaceJoined,
                    message: "joined space '\(membership.space)' (role \(membership.role.rawValue)); the pull brings it whole",
                    details: [.space: membership.space, .role: membership.role.rawValue]
                )
            )
            await status.membershipChanged(.joined(membership))
        }
        for (membership, old) in outcome.spaces.roleChanged {
            await connection.journal.record(
                JournalEvent(
                    kind: .spaceRoleChanged,
                    message: "role in space '\(membership.space)' changed from \(old.rawValue) to \(membership.role.rawValue)",
                    details: [.space: membership.space, .role: membership.role.rawValue, .from: old.rawValue]
                )
            )
            await status.membershipChanged(.roleChanged(membership, from: old))
        }
        for revoked in outcome.spaces.revoked {
            await connection.journal.record(
                JournalEvent(
                    kind: .spaceRevoked,
                    message: "space '\(revoked.space)' was revoked: \(revoked.removed) row\(revoked.removed == 1 ? "" : "s") left the store"
                        + (revoked.deadLettered > 0
                            ? ", \(revoked.deadLettered) queued change\(revoked.deadLettered == 1 ? "" : "s") became dead letters" : ""),
                    details: [.space: revoked.space, .removed: "\(revoked.removed)", .deadLettered: "\(revoked.deadLettered)"]
                )
            )
            await status.membershipChanged(.left(space: revoked.space, rowsRemoved: revoked.removed, deadLettered: revoked.deadLettered))
        }
    }

    /// Where the pull starts from `position`, the cursor and pull from scratch the store saved.
    private func start(
        at position: (cursor: String?, fromScratch: Bool),
        answered: [Int64],
        leftOutBy: ProtocolVersion?
    ) async throws -> (cursor: String?, scratch: Bool) {
        if let leftOutBy, leftOutBy < ProtocolVersion.current {
            // An earlier version of the app left out changes it did not know, and its cursor moved
            // past them: this one may know them, and only a pull from scratch from the start
            // brings them again (one under way may have passed them too).
            return (nil, try await beginFromScratch(.leftOut(by: leftOutBy)))
        }
        // A pull from scratch under way (this run's, or one a relaunch interrupted) goes on as one.
        // A store's first pull names the writes the server answered it, and gets the tombstones
        // that may delete them; without any, it notes what it gets and sweeps what it did not
        // (it may hold records otherwise: a copy, rows written with capture off).
        if position.cursor == nil && !position.fromScratch && (fromScratch || answered.isEmpty) {
            return (nil, try await beginFromScratch(fromScratch ? .full : nil))
        }
        return (position.cursor, position.fromScratch)
    }

    /// A page, or the server's refusal of the cursor (unknown to it, or expired) with its words.
    private enum Fetched {
        /// `leftOut`: the changes of the page this version does not know, left out of it.
        case page(PullResponse, leftOut: [UnrecognizedChange])
        case refused(String)
    }

    /// Why a pull starts from scratch, for the journal.
    private enum Restart {
        /// The app asked for a full pull.
        case full
        /// The server refused the cursor, for this reason.
        case refused(String)
        /// An earlier version of the app left out changes it did not know.
        case leftOut(by: ProtocolVersion)
    }

    /// One page after `cursor`, or the server's refusal of it.
    private func fetchPage(after cursor: String?, answered: String) async throws -> Fetched {
        var path = Endpoint.pull + "?limit=\(pageSize)"
        if !answered.isEmpty { path += "&answered=\(answered)" }
        if let cursor { path += "&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cursor)" }
        let response = try await connection.send(TransportRequest(method: "GET", path: path))
        guard response.status == 200 else {
            if let error = try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body),
                (response.status == 400 && error.code == .invalidCursor) || (response.status == 410 && error.code == .cursorExpired)
            {
                return .refused("\(error.error.code): \(error.error.message)")
            }
            throw FerryError.protocolViolation("pull answered \(response.status): \(SyncConnection.message(in: response))")
        }
        do {
            var unrecognized: [UnrecognizedChange] = []
            let page = try PullResponse.decode(from: response.body, unrecognized: &unrecognized)
            for change in unrecognized {
                await connection.journal.record(
                    JournalEvent(
                        kind: .unrecognized,
                        message: "a pulled change this version does not know was left out (a later version pulls it again): \(change)"
                    )
                )
            }
            return .page(page, leftOut: unrecognized)
        } catch {
            throw FerryError.protocolViolation("pull response is not valid: \(error)", underlying: error)
        }
    }

    /// Applies one page and saves its cursor; returns how many changes were written locally,
    /// and what the app's schema refused (set aside, `PulledRecords`). The cursor moves on
    /// whatever was refused: one record must not stop every pull after it.
    private func apply(_ page: PullResponse, fromScratch: Bool, leftOut: [UnrecognizedChange]) async throws -> PageOutcome {
        do {
            return try await write(page, fromScratch: fromScratch, leftOut: leftOut, carefully: false)
        } catch is PulledRecords.NeedsCare {
            // The schema refused something: the transaction rolled back whole, and the page goes again record by record.
            return try await write(page, fromScratch: fromScratch, leftOut: leftOut, carefully: true)
        }
    }

    /// `apply` in one transaction, the page's records written `carefully` or not (`PulledRecords.write`).
    private func write(_ page: PullResponse, fromScratch: Bool, leftOut: [UnrecognizedChange], carefully: Bool) async throws -> PageOutcome {
        try await store.database.write { db in
            try lease.confirm(db)
            // Spaces revoked leave the store first: a space revoked and granted again comes back whole in this page or the next.
            let spaces = try SpaceMemberships.apply(page, store: store, db: db)
            try SpaceJoins.noteJoins(page.changes, db: db)
            var writer = RecordWriter(store: store)
            let records = page.changes.map { RecordRef(entity: $0.entity, entityID: $0.entityID) }
            // From scratch, every record is taken as sent, whatever version this store knew: a
            // restored server's versions may have gone back.
            let known = fromScratch ? [:] : try KnownVersions.of(records, db: db)
            // A record whose change was left out is still the server's: the sweep keeps it.
            if fromScratch { try Self.noteSeen(records + leftOut.compactMap(\.record), db: db) }
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
                        naturalKey: change.naturalKey,
                        space: change.space
                    )
                )
            }
            let outcome = try FerryStore.withoutCapture(db) { try PulledRecords.write(news, carefully: carefully, writer: &writer, db: db) }
            for record in outcome.written { learned.set(record.version, of: record.ref) }
            try learned.save(db: db)
            try PulledRecords.save(outcome, db: db)
            try StoreMeta.setCursor(page.cursor, db: db)
            if !leftOut.isEmpty { try StoreMeta.setLeftOut(by: ProtocolVersion.current, db: db) }
            return PageOutcome(applied: outcome.written.count, refused: outcome.refused.map { ($0.record.ref, $0.reason) }, spaces: spaces)
        }
    }

    /// Starts a pull from scratch in one transaction: no cursor, nothing noted yet. Returns
    /// whether it must note and sweep, that is whether the store holds any record; journals why.
    private func beginFromScratch(_ restart: Restart?) async throws -> Bool {
        let sweeping = try await store.database.write { [store, lease] db in
            try lease.confirm(db)
            let holds =
                try KnownVersions.anyKnown(db: db) || PulledRecords.anySetAside(db)
                || store.tables.contains { table in
                    try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(table.table.quotedDatabaseIdentifier))") == true
                }
            try db.execute(sql: "DELETE FROM ferry_scratch_seen")
            try StoreMeta.beginFromScratch(sweeps: holds, db: db)
            // It brings every change again, those an earlier version left out too.
            try StoreMeta.setLeftOut(by: nil, db: db)
            return holds
        }
        let line: (reason: String, message: String)? =
            switch restart {
            case .full: ("full", "a full pull from scratch")
            case .refused(let reason): (reason, "the server refused the pull's cursor (\(reason)); pulling again from scratch")
            case .leftOut(let version):
                (
                    "left out by protocol \(version)",
                    "this app's earlier version (protocol \(version)) left out pulled changes it did not know; pulling again from scratch"
                )
            case nil: nil
            }
        if let line {
            await connection.journal.record(JournalEvent(kind: .pullRestarted, message: line.message, details: [.reason: line.reason]))
        }
        return sweeping
    }

    /// Notes `records` as brought back by the pull from scratch under way.
    private static func noteSeen(_ records: [RecordRef], db: Database) throws {
        guard !records.isEmpty else { return }
        let keys = String(decoding: try JSONEncoder().encode(records.map { [$0.entity, $0.entityID] }), as: UTF8.self)
        try db.cachedStatement(
            sql: "INSERT OR IGNORE INTO ferry_scratch_seen SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)"
        ).execute(arguments: [keys])
    }

    /// Ends a pull from scratch, caught up, in one transaction: the records it did not bring back
    /// leave the store, uncaptured, except those with changes queued; so do their versions and
    /// set-aside copies.
    private func sweep() async throws {
        let (removed, kept) = try await store.database.write { [store, lease] db in
            try lease.confirm(db)
            var unseen: [RecordRef] = []
            for table in store.tables {
                let entity = table.entityColumn.map { "t.\($0.quotedDatabaseIdentifier)" } ?? "?"
                let key = table.primaryKey.quotedDatabaseIdentifier
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT \(entity), CAST(\(key) AS TEXT) FROM \(table.table.quotedDatabaseIdentifier) t WHERE NOT EXISTS
                            (SELECT 1 FROM ferry_scratch_seen s WHERE s.entity = \(entity) AND s.entity_id = CAST(t.\(key) AS TEXT))
                        """,
                    arguments: table.entityColumn == nil ? [table.entity, table.entity] : []
                )
                unseen += rows.map { RecordRef(entity: $0[0], entityID: $0[1]) }
            }
            let unseenVersions = try KnownVersions.records(notIn: "ferry_scratch_seen", db: db)
            // Changes queued, in flight or set aside as dead letters: the record stays with them.
            let queued = try OutboxTable.recordsWithChanges(db)
            let gone = unseen.filter { !queued.contains($0) }
            var writer = RecordWriter(store: store)
            _ = try FerryStore.withoutCapture(db) { try writer.remove(try RecordWriter.Selection.records(gone, in: store), db: db) }
            try KnownVersions.forget(Set(gone + unseenVersions).filter { !queued.contains($0) }, db: db)
            try PulledRecords.forgetSetAside(notIn: "ferry_scratch_seen", db: db)
            try db.execute(sql: "DELETE FROM ferry_scratch_seen")
            try StoreMeta.endFromScratch(db)
            return (gone.count, unseen.count - gone.count)
        }
        await connection.journal.record(
            JournalEvent(
                kind: .pullSwept,
                message: "the pull from scratch is caught up: \(removed) record\(removed == 1 ? "" : "s") it did not bring back left the store"
                    + (kept > 0 ? ", \(kept) with changes queued stay" : ""),
                details: [.removed: "\(removed)", .kept: "\(kept)"]
            )
        )
    }

    /// Ends the joins of spaces this store held rows of, once the pull is caught up (`SpaceJoins.finishJoins`).
    private func finishJoins() async throws {
        guard try await store.database.read({ db in try SpaceJoins.anyUnderWay(db) }) else { return }
        let removed = try await store.database.write { [store, lease] db in
            try lease.confirm(db)
            return try SpaceJoins.finishJoins(store: store, db: db)
        }
        guard removed > 0 else { return }
        await connection.journal.record(
            JournalEvent(
                kind: .pullSwept,
                message:
                    "joined spaces are whole: \(removed) row\(removed == 1 ? "" : "s") the join did not bring back (deleted by another member) left the store",
                details: [.removed: "\(removed)", .kept: "0"]
            )
        )
    }

    /// Tries the records set aside by this pull or earlier ones again, once the pull is caught
    /// up, then the rows held aside by a revocation whose parents are back (`RecordWriter.remove`).
    private func retrySetAside() async throws -> PageOutcome {
        try await store.database.write { db in
            try lease.confirm(db)
            let outcome = try PulledRecords.retrySetAside(store: store, db: db)
            var writer = RecordWriter(store: store)
            _ = try FerryStore.withoutCapture(db) { try writer.restoreHeld(db: db) }
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
                    details: [.entity: record.entity, .entityID: record.entityID]
                )
            )
        }
    }
}

/// What writing one page did.
private struct PageOutcome: Sendable {
    var applied: Int
    var refused: [(RecordRef, String)]
    var spaces = SpaceMemberships.Changes()
}

/// Totals of one pull.
public struct PullSummary: Sendable, Equatable {
    /// Pages asked for, including one the server refused for an unknown cursor; retries are not counted.
    public var requests = 0
    /// The user's memberships as the last page that carried them was read (a page leaves them
    /// out when they did not change since its cursor); `nil` when none did.
    public var spaces: [Membership]?
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
