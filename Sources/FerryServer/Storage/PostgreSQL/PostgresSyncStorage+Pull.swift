import FerryProtocol
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import PostgresNIO

/// A pull on PostgreSQL: the personal history, then the spaces' rows, in one snapshot.
extension PostgresSyncStorage {
    /// Reads up to `limit` records changed after `cursor`, leaving out `ownWrites` and stopping
    /// at the page's data budget (`PullPage.Builder`): the personal history in one statement,
    /// then, for a user in spaces, the memberships with the spaces' heads and each
    /// space with something to read while the page has room (`SpacedPage`), all in one
    /// `REPEATABLE READ` transaction: the memberships the page reports and the rows it returns
    /// are one view, so a member removed and the space written while the pull reads is never
    /// sent what was written after the removal. Each space's changes commit in order of position
    /// (its change lock), so what the snapshot holds of a space is all of it up to its last row.
    /// Throws `ProtocolViolation` (`invalid_cursor`) for a cursor this database did not issue for `userID`.
    public func pull(userID: String, cursor: String?, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage {
        let from = try cursor.map { cursor throws(ProtocolViolation) in try cursors.decodePosition(cursor, userID: userID) }
        if let from, let page = try await continuing(from, userID: userID, limit: limit, ownWrites: ownWrites) { return page }
        return try await withDatabase { [self] db in
            try await Self.snapshot(db, logger: logger) { db in
                var personal = PullPage.Builder(after: from?.personal.position ?? 0, limit: limit, leavingOut: ownWrites)
                let first = try await Self.read(
                    Self.pullQuery(userID: userID, cursor: from?.personal, naming: ownWrites, for: personal, entries: from?.spaces ?? [:]),
                    into: &personal,
                    on: db,
                    logger: logger
                )
                // The head was read in the statement's snapshot, with the rows: a cursor it refuses
                // is refused before any of them is sent.
                let start = try first.head.start(from: from?.personal, naming: ownWrites)
                let page = SpacedPage(
                    from: from,
                    personal: personal,
                    head: first.head,
                    start: start,
                    limit: limit,
                    ownWrites: ownWrites,
                    userID: userID
                )
                // The statement also said whether any space needs a look (`pullQuery`'s `entries`).
                if first.version == (from?.memberships ?? 0), first.spaces == (from?.spaces.count ?? 0), first.moved == 0 {
                    return page.pageWithSpacesUnchanged(cursors: cursors, cursor: cursor)
                }
                return try await readSpaces(page, version: first.version, userID: userID, ownWrites: ownWrites, db: db)
            }
        }
    }

    /// The rest of a page after the personal history, in the caller's snapshot: the spaces the
    /// user reads, then each, in order of key, then the ids of those the cursor named that the
    /// user reads no more.
    func readSpaces(
        _ page: SpacedPage,
        version: Int64,
        userID: String,
        ownWrites: OwnWrites?,
        db: PostgresConnection
    ) async throws -> PullPage {
        var page = page
        let spaces = try await Self.readableSpaces(of: userID, on: db, logger: logger)
        await interleaving.reachedAsync()
        // The spaces with something to read are read in one statement (a new member of 1,000
        // spaces paid a statement, a round trip, for each); a space that statement may have cut
        // short (it read as many rows as the page may scan) is read again on its own.
        var probe = page
        var reading: [(space: ReadableSpace, start: PullCursor)] = []
        for space in spaces {
            let start = try probe.start(of: space)
            if probe.needsRead(space, from: start) { reading.append((space, start)) }
        }
        var batched: [Int64: [PulledRow]] = [:]
        var cutFrom: Int?
        if reading.count > 1, let (first, start) = reading.first {
            let builder = page.builder(for: first, from: start)
            let scan = PullPage.scanLimit(builder.limit, leavingOut: ownWrites)
            let rows = try await Self.spacesRows(
                of: Self.spacesQuery(reading.map { ($0.space.key, $0.start) }, scan: scan, budget: builder.budget, takesFirst: builder.takesFirst),
                on: db,
                logger: logger
            )
            for (key, row) in rows { batched[key, default: []].append(row) }
            if rows.count >= scan, let last = rows.last?.key { cutFrom = reading.firstIndex { $0.space.key == last } }
        }
        let order = Dictionary(uniqueKeysWithValues: reading.enumerated().map { ($1.space.key, $0) })
        for space in spaces {
            let start = try page.start(of: space)
            guard page.needsRead(space, from: start) else { continue }
            var builder = page.builder(for: space, from: start)
            if reading.count > 1, let index = order[space.key], index < (cutFrom ?? reading.count) {
                Self.offer(batched[space.key] ?? [], to: &builder)
                page.add(builder, of: space, from: start)
                continue
            }
            let readHistory = try await Self.read(
                Self.pullQuery(userID: userID, space: space.key, cursor: start, for: builder),
                into: &builder,
                on: db,
                logger: logger
            )
            var read = space
            read.head = readHistory.head
            page.add(builder, of: read, from: start)
        }
        let revokedKeys = page.revoked(readable: spaces)
        var revoked: [String] = []
        if !revokedKeys.isEmpty {
            for try await id in try await db.query("SELECT id FROM spaces WHERE key = ANY(\(revokedKeys)::int8[]) ORDER BY id", logger: logger)
                .decode(String.self)
            {
                revoked.append(id)
            }
        }
        return page.page(cursors: cursors, spaces: spaces, version: version, revoked: revoked)
    }

    /// The rows after each of `spaces`' positions, in one statement: space by space in the
    /// order given, each in change order, `scan` rows in all at most, and of those only up to the
    /// first whose data passes `budget` (`pullQuery` reads one history so). Each row comes with
    /// its space's key.
    static func spacesQuery(_ spaces: [(key: Int64, start: PullCursor)], scan: Int, budget: Int, takesFirst: Bool) -> PostgresQuery {
        let keys = spaces.map { String($0.key) }.joined(separator: ",")
        let afters = spaces.map { String($0.start.position) }.joined(separator: ",")
        let horizons = spaces.map { String($0.start.horizon) }.joined(separator: ",")
        return """
            SELECT p.key, p.entity, p.entity_id, p.version, p.deleted, p.natural_key, CASE WHEN p.fits THEN p.data END, p.seq, p.changed_at,
                p.written_by, p.written_mutation, p.written_seq, p.size, p.fits
            FROM (
                SELECT *, running <= \(budget) OR (\(takesFirst) AND running = size) AS fits FROM (
                    SELECT c.key, r.*, coalesce(octet_length(r.data), 0) AS size,
                        sum(coalesce(octet_length(r.data), 0)) OVER (ORDER BY c.ord, r.seq ROWS UNBOUNDED PRECEDING) AS running
                    FROM unnest('{\(unescaped: keys)}'::int8[], '{\(unescaped: afters)}'::int8[], '{\(unescaped: horizons)}'::int8[])
                        WITH ORDINALITY AS c (key, after, horizon, ord)
                    CROSS JOIN LATERAL (
                        SELECT entity, entity_id, version, deleted, natural_key, data, seq, changed_at, written_by, written_mutation, written_seq
                        FROM records
                        WHERE user_id = (chr(1) || c.key::text) COLLATE "C" AND seq > c.after AND NOT (deleted AND seq <= c.horizon)
                        ORDER BY seq LIMIT \(scan)
                    ) r
                    ORDER BY c.ord, r.seq LIMIT \(scan)
                ) scanned
                WHERE running - size <= \(budget)
            ) p
            ORDER BY p.running
            """
    }

    /// Runs a `spacesQuery`: its rows in order, each with its space's key.
    static func spacesRows(of query: PostgresQuery, on db: PostgresConnection, logger: Logger) async throws -> [(key: Int64, row: PulledRow)] {
        var rows: [(key: Int64, row: PulledRow)] = []
        for try await row in try await db.query(query, logger: logger) {
            var columns = ColumnReader(row)  // in the statement's order
            let key = try columns.next(Int64.self)
            let entity = try columns.next(String.self)
            let entityID = try columns.next(String.self)
            let version = try columns.next(Int64.self)
            let deleted = try columns.next(Bool.self)
            let naturalKey = try columns.next(String?.self)
            let data = try columns.next(ByteBuffer?.self)
            let seq = try columns.next(Int64.self)
            let record = StoredRecord(
                entity: entity,
                entityID: entityID,
                version: version,
                deleted: deleted,
                naturalKey: naturalKey,
                changedAt: try columns.next(Int64?.self),
                writtenBy: try columns.next(String?.self),
                writtenMutation: try columns.next(Int64?.self),
                writtenSeq: try columns.next(Int64?.self)
            )
            rows.append((key, (record, seq, try columns.next(Int.self), try columns.next(Bool.self), data)))
        }
        return rows
    }

    /// `body` in a read-only `REPEATABLE READ` transaction on `connection`, a pull's: every
    /// statement of it reads one snapshot, and is planned to walk its index (`planSettings`,
    /// for this transaction only).
    static func snapshot<T: Sendable>(
        _ connection: PostgresConnection,
        logger: Logger,
        _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await connection.query("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
        let value: T
        do {
            try await connection.query(PostgresQuery(unsafeSQL: walkIndexesSQL), logger: logger)
            value = try await body(connection)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        try await connection.query("COMMIT", logger: logger)
        return value
    }

    /// A space's first download one statement a page: when the cursor stopped in a space
    /// (`PullPosition.continuing`), one statement reads on in it, with the memberships' version
    /// and whether the user still reads it. `nil` when the memberships changed, or the space's
    /// read reached its end: the page is then read as any other, the personal history first.
    func continuing(_ from: PullPosition, userID: String, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage? {
        guard let key = from.continuing, let entry = from.spaces[key] else { return nil }
        // The statement writes the space's id into each change; the builder takes what it decided.
        let planned = PullPage.Builder(
            after: entry.position,
            limit: limit,
            leavingOut: SpacedPage.leavesOut(ownWrites, joining: entry, userID: userID)
        )
        let query = Self.pullQuery(userID: userID, space: key, cursor: entry, for: planned, member: true)
        let (read, builder) = try await withDatabase { [logger] db in
            try await Self.snapshot(db, logger: logger) { db in
                var builder = planned
                let read = try await Self.read(query, into: &builder, on: db, logger: logger)
                return (read, builder)
            }
        }
        guard read.version == from.memberships, let id = read.member else { return nil }
        let space = ReadableSpace(key: key, id: id, role: .read, head: read.head, last: read.head.position)
        let start = try space.head.start(from: entry)
        guard builder.stopped else { return nil }
        return SpacedPage.continuing(from: from, in: space, read: builder, start: start, userID: userID, cursors: cursors)
    }

    /// A row of a pull statement: a record, its position and size, and whether it fits the page.
    typealias PulledRow = (record: StoredRecord, seq: Int64, size: Int, fits: Bool, data: ByteBuffer?)

    /// What a `pullQuery` read besides its page: the head of the history, the user's memberships'
    /// version and count, how many of the cursor's space entries moved.
    struct PulledHistory: Sendable {
        var head = ChangeHead()
        var version: Int64 = 0
        var spaces = 0
        var moved = 0
        /// With `pullQuery`'s `member`: the space's id if the user still reads it.
        var member: String?
    }

    /// Runs `query`, a `pullQuery` made `for: builder`, on `db`, and gives `builder` the changes
    /// it took: one row, the page's changes already JSON (`EncodedChanges`).
    static func read(
        _ query: PostgresQuery,
        into builder: inout PullPage.Builder,
        on db: PostgresConnection,
        logger: Logger
    ) async throws -> PulledHistory {
        var pulled = PulledHistory()
        for try await row in try await db.query(query, logger: logger) {
            // Column by column, in the statement's order (see ColumnReader).
            var columns = ColumnReader(row)
            pulled.head = ChangeHead(
                position: try columns.next(Int64.self),
                epoch: try columns.next(Int64.self),
                epochBase: try columns.next(Int64.self),
                purgedThrough: try columns.next(Int64.self),
                lastMutationID: try columns.next(Int64?.self) ?? 0
            )
            pulled.version = try columns.next(Int64?.self) ?? 0
            pulled.spaces = try columns.next(Int.self)
            pulled.moved = try columns.next(Int.self)
            pulled.member = try columns.next(String?.self)
            let json = try columns.next(ByteBuffer?.self) ?? ByteBuffer()
            let count = try columns.next(Int.self)
            let dataBytes = try columns.next(Int.self)
            let through = try columns.next(Int64?.self)
            let stopped = try columns.next(Bool.self)
            builder.take(EncodedChanges(json: json, count: count, dataBytes: dataBytes), through: through, stopped: stopped)
        }
        return pulled
    }

    /// Offers a statement's rows to `builder` in change order: the statement has no ORDER BY of
    /// its own (it would sort the page's data), and the window already decided which rows fit in
    /// that order. It sends no row past the first that passes the budget, and that one without its data.
    static func offer(_ rows: [PulledRow], to builder: inout PullPage.Builder) {
        for row in rows.sorted(by: { $0.seq < $1.seq }) {
            guard builder.offer(row.record, seq: row.seq, size: row.size, fits: row.fits, data: { row.data.map { Data($0.readableBytesView) } })
            else { break }
        }
    }

    /// The spaces `userID` reads, in order of key, with the heads of their histories.
    static func readableSpaces(of userID: String, on db: PostgresConnection, logger: Logger) async throws -> [ReadableSpace] {
        var spaces: [ReadableSpace] = []
        for try await row in try await db.query(
            """
            SELECT m.space_key, s.id, m.role, coalesce(h.position, 0), coalesce(h.epoch, 0), coalesce(h.epoch_base, 0),
                coalesce(h.purged_through, 0)
            FROM space_members m JOIN spaces s ON s.key = m.space_key
            LEFT JOIN user_changes h ON h.user_id = (chr(1) || m.space_key::text) COLLATE "C"
            WHERE m.user_id = \(userID) ORDER BY m.space_key
            """,
            logger: logger
        ) {
            var columns = ColumnReader(row)  // in the statement's order; a row per membership of each pull
            let key = try columns.next(Int64.self)
            let id = try columns.next(String.self)
            let role = try columns.next(String.self)
            let head = ChangeHead(
                position: try columns.next(Int64.self),
                epoch: try columns.next(Int64.self),
                epochBase: try columns.next(Int64.self),
                purgedThrough: try columns.next(Int64.self)
            )
            spaces.append(ReadableSpace(key: key, id: id, role: SpaceRole(rawValue: role) ?? .read, head: head, last: head.position))
        }
        return spaces
    }

    /// A pull page's statement over one history (the user's, or `space`'s), one snapshot, one
    /// row: its `ChangeHead` and how many spaces the user is in, then the page `builder` would
    /// make of the rows after the cursor, decided by the database and written as JSON by it
    /// (PROTOCOL.md's changes, each record's data spliced in as stored), so that the server moves
    /// the page's bytes instead of decoding and writing again every column of every row.
    ///
    /// It reads the rows after the cursor in change order (tombstones up to its horizon left
    /// out; a pull from scratch naming no writes of its own has the head as its horizon),
    /// walking `records_pull` and stopping at `builder`'s scan limit, and of those only up to
    /// the first whose data passes its budget: the running total reads each row's size from its
    /// header, not its data, so rows past the budget cost an index entry and a heap tuple. Then
    /// it takes them as `PullPage.Builder.offer` would, row by row: a row the client's own
    /// answered writes hold (`OwnWrites.leavesOut`) is passed; the first other that the page has
    /// no room for (its limit of changes, its budget: the first always fits with `takesFirst`),
    /// or that passes the scanned budget, stops it. It gives the changes taken, their data's
    /// bytes, the position read through (the last row taken or passed; `NULL` for none) and
    /// whether it stopped before the end of the history. A history never written has zeros.
    ///
    /// With the history it gives the version and count of the user's memberships, and how many of
    /// the cursor's space `entries` moved (their space's position, epoch or purge horizon is not
    /// what the entry saw): when none did and the memberships are the cursor's, no space needs a
    /// look, and an empty pull is this one statement however many spaces the user is in. With
    /// `member`, the space's id if the user still reads it.
    static func pullQuery(
        userID: String,
        space: Int64? = nil,
        cursor: PullCursor?,
        naming ownWrites: OwnWrites? = nil,
        for builder: PullPage.Builder,
        entries: [Int64: PullCursor] = [:],
        member: Bool = false
    ) -> PostgresQuery {
        let partition = space.map(SpacePartition.name) ?? userID
        let after = cursor?.position ?? 0
        // `nil`: the head (`ChangeHead.start(from:naming:)`).
        let horizon = cursor?.horizon ?? (ownWrites == nil ? nil : 0)
        let spaceKey = space.map(String.init) ?? "NULL"
        // The space's id in each change (`"null"` only for a space gone, whose read `member` discards).
        let spaceField = space == nil ? "" : #" || ',"space":' || coalesce(to_json((SELECT id FROM spaces WHERE key = \#(spaceKey)))::text, 'null')"#
        // The client's own answered writes (`OwnWrites.leavesOut`); none when the writer is NULL.
        let writer = builder.ownWrites?.clientID
        let answered = "{" + (builder.ownWrites?.answered ?? []).map { "[\($0.lowerBound),\($0.upperBound)]" }.joined(separator: ",") + "}"
        return """
            SELECT coalesce(u.position, 0), coalesce(u.epoch, 0), coalesce(u.epoch_base, 0), coalesce(u.purged_through, 0),
                (SELECT last_mutation_id FROM clients WHERE user_id = \(userID) AND client_id = \(ownWrites?.clientID)),
                (SELECT version FROM member_versions WHERE user_id = \(userID)),
                (SELECT count(*)::int8 FROM space_members WHERE user_id = \(userID)),
                \(unescaped: Self.movedEntries(entries)),
                (SELECT s.id FROM spaces s JOIN space_members m ON m.space_key = s.key AND m.user_id = \(userID)
                    WHERE s.key = \(unescaped: member ? spaceKey : "NULL") AND NOT s.deleted),
                p.changes, coalesce(p.taken, 0), coalesce(p.data_bytes, 0), p.through, coalesce(p.stopped, false)
            FROM (SELECT 1) one
            LEFT JOIN user_changes u ON u.user_id = \(partition)
            LEFT JOIN LATERAL (
                SELECT
                    string_agg(
                        CASE WHEN NOT halted AND NOT leaves_out THEN
                            convert_to(
                                '{"entity":' || to_json(entity)::text || ',"entityID":' || to_json(entity_id)::text\(unescaped: spaceField)
                                    || CASE WHEN deleted THEN ',"op":"delete","version":' ELSE ',"op":"upsert","version":' END || version::text
                                    || coalesce(',"naturalKey":' || to_json(natural_key)::text, '')
                                    || CASE WHEN deleted OR data IS NULL THEN '}' ELSE ',"data":' END,
                                'UTF8'
                            ) || CASE WHEN deleted OR data IS NULL THEN ''::bytea ELSE data || '\\x7d'::bytea END
                        END,
                        '\\x2c'::bytea ORDER BY seq
                    ) AS changes,
                    count(*) FILTER (WHERE NOT halted AND NOT leaves_out)::int8 AS taken,
                    coalesce(sum(size) FILTER (WHERE NOT halted AND NOT leaves_out), 0)::int8 AS data_bytes,
                    max(seq) FILTER (WHERE NOT halted) AS through,
                    bool_or(halted) OR count(*) >= \(builder.scanLimit) AS stopped
                FROM (
                    SELECT *, bool_or(
                            NOT fits OR NOT leaves_out AND NOT (taken <= \(builder.limit) AND ((\(builder.takesFirst) AND taken = 1) OR taken_bytes <= \(builder.budget)))
                        ) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS halted
                    FROM (
                        SELECT *, running <= \(builder.budget) OR (\(builder.takesFirst) AND running = size) AS fits,
                            count(*) FILTER (WHERE NOT leaves_out) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS taken,
                            sum(size) FILTER (WHERE NOT leaves_out) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS taken_bytes
                        FROM (
                            SELECT entity, entity_id, version, deleted, natural_key, data, seq, coalesce(octet_length(data), 0) AS size,
                                sum(coalesce(octet_length(data), 0)) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS running,
                                coalesce(written_by = \(writer) AND written_seq = seq AND \(answered)::int8multirange @> written_mutation, false)
                                    AS leaves_out
                            FROM records
                            WHERE user_id = \(partition) AND seq > \(after) AND NOT (deleted AND seq <= coalesce(\(horizon), u.position))
                            ORDER BY seq LIMIT \(builder.scanLimit)
                        ) scanned
                        WHERE running - size <= \(builder.budget)
                    ) judged
                ) decided
            ) p ON u.position IS NOT NULL
            """
    }

    /// `pullQuery`'s count of the cursor's space entries that moved, as SQL: the entries are
    /// numbers, written into it as literals, so that a pull naming no space plans no more than
    /// it did before spaces (every pull statement is planned again: PostgresNIO sends it unnamed).
    static func movedEntries(_ entries: [Int64: PullCursor]) -> String {
        guard !entries.isEmpty else { return "0::int8" }
        let (keys, positions, epochs) = (
            entries.keys.map(String.init).joined(separator: ","), entries.values.map { String($0.position) }.joined(separator: ","),
            entries.values.map { String($0.epoch) }.joined(separator: ",")
        )
        return """
            (SELECT count(*)::int8 FROM unnest('{\(keys)}'::int8[], '{\(positions)}'::int8[], '{\(epochs)}'::int8[]) AS c (key, position, epoch)
                LEFT JOIN user_changes h ON h.user_id = (chr(1) || c.key::text) COLLATE "C"
                WHERE coalesce(h.position, 0) <> c.position OR coalesce(h.epoch, 0) <> c.epoch OR coalesce(h.purged_through, 0) > c.position)
            """
    }
}
