import FerryProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// A pull on SQLite: the personal history, then the spaces' rows, in one read transaction.
extension SQLiteSyncStorage {
    /// Reads up to `limit` records changed after `cursor` in one read transaction, leaving out
    /// `ownWrites` and stopping at the page's data budget (`PullPage.Builder`): the personal
    /// history first, then each space the user reads (`SpacedPage`). Throws `ProtocolViolation`
    /// (`invalid_cursor`) for a cursor this database did not issue for `userID`.
    public func pull(userID: String, cursor: String?, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage {
        let from = try cursor.map { cursor throws(ProtocolViolation) in try cursors.decodePosition(cursor, userID: userID) }
        let (codec, interleaving) = (cursors, interleaving)
        return try await mapErrors {
            try await writer.read { db in
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT value, epoch, epoch_base, (SELECT purged_through FROM user_horizons WHERE user_id = ?)
                            FROM change_sequence WHERE id = 1
                            """
                    ),
                    arguments: [userID]
                )
                guard let row else { throw StorageError.corrupt("change_sequence is empty") }
                var head = ChangeHead(position: row[0], epoch: row[1], epochBase: row[2], purgedThrough: row[3] ?? 0)
                if let ownWrites {
                    head.lastMutationID =
                        try Int64.fetchOne(
                            db.cachedStatement(sql: "SELECT last_mutation_id FROM clients WHERE user_id = ? AND client_id = ?"),
                            arguments: [userID, ownWrites.clientID]
                        ) ?? 0
                }
                let start = try head.start(from: from?.personal, naming: ownWrites)
                var personal = PullPage.Builder(after: start.position, limit: limit, leavingOut: ownWrites)
                try Self.read(&personal, partition: userID, from: start, scan: PullPage.scanLimit(limit, leavingOut: ownWrites), db: db)
                let page = SpacedPage(
                    from: from,
                    personal: personal,
                    head: head,
                    start: start,
                    limit: limit,
                    ownWrites: ownWrites,
                    userID: userID
                )
                // One statement says whether any space needs a look: the memberships' version and
                // count, and the last position of any of their rows or purges.
                let summary = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT (SELECT version FROM member_versions WHERE user_id = ?1), count(*), max(s.last_position)
                            FROM space_members m JOIN spaces s ON s.key = m.space_key WHERE m.user_id = ?1
                            """
                    ),
                    arguments: [userID]
                )
                let version: Int64 = summary?[0] ?? 0
                if (from ?? PullPosition(personal: start)).spacesUnchanged(
                    version: version,
                    count: summary?[1] ?? 0,
                    last: summary?[2] ?? 0,
                    head: head
                ) {
                    return page.pageWithSpacesUnchanged(cursors: codec, cursor: cursor)
                }
                return try Self.readSpaces(
                    page,
                    version: version,
                    head: head,
                    userID: userID,
                    ownWrites: ownWrites,
                    cursors: codec,
                    interleaving: interleaving,
                    db: db
                )
            }
        }
    }

    /// The rest of a page after the personal history: each space the user reads, in order of key.
    static func readSpaces(
        _ page: SpacedPage,
        version: Int64,
        head: ChangeHead,
        userID: String,
        ownWrites: OwnWrites?,
        cursors: CursorCodec,
        interleaving: PullInterleaving,
        db: Database
    ) throws -> PullPage {
        var page = page
        // Every space the user reads, with the last position its rows hold and its purge horizon.
        let spaces = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT m.space_key, s.id, m.role,
                        (SELECT max(seq) FROM records r WHERE r.user_id = char(1) || m.space_key),
                        (SELECT purged_through FROM user_horizons h WHERE h.user_id = char(1) || m.space_key)
                    FROM space_members m JOIN spaces s ON s.key = m.space_key WHERE m.user_id = ? ORDER BY m.space_key
                    """
            ),
            arguments: [userID]
        ).map { row in
            var spaceHead = head
            spaceHead.purgedThrough = row[4] ?? 0
            spaceHead.lastMutationID = 0
            return ReadableSpace(
                key: row[0],
                id: row[1],
                role: SpaceRole(rawValue: row[2]) ?? .read,
                head: spaceHead,
                last: row[3] ?? 0
            )
        }
        // The read transaction holds its snapshot: what commits from here on is not in this page.
        interleaving.reached()
        for space in spaces {
            let start = try page.start(of: space)
            guard page.needsRead(space, from: start) else { continue }
            var builder = page.builder(for: space, from: start)
            try Self.read(
                &builder,
                partition: SpacePartition.name(space.key),
                from: start,
                scan: PullPage.scanLimit(builder.limit, leavingOut: ownWrites),
                db: db
            )
            page.add(builder, of: space, from: start)
        }
        let revokedKeys = page.revoked(readable: spaces)
        var revoked: [String] = []
        if !revokedKeys.isEmpty {
            revoked = try String.fetchAll(
                db,
                sql: "SELECT id FROM spaces WHERE key IN (SELECT value FROM json_each(?)) ORDER BY id",
                arguments: [String(decoding: try JSONEncoder().encode(revokedKeys), as: UTF8.self)]
            )
        }
        return page.page(cursors: cursors, spaces: spaces, version: version, revoked: revoked)
    }

    /// Offers `builder` the rows of `partition` after `start`, in change order. A cursor steps
    /// one row at a time: the rows past the page's budget are never read, and a row's data is
    /// copied out only when the page takes it.
    static func read(_ builder: inout PullPage.Builder, partition: String, from start: PullCursor, scan: Int, db: Database) throws {
        let rows = try Row.fetchCursor(
            db.cachedStatement(
                sql: """
                    SELECT entity, entity_id, version, deleted, natural_key, data, seq, changed_at,
                        written_by, written_mutation, written_seq, coalesce(length(data), 0)
                    FROM records WHERE user_id = ? AND seq > ? AND NOT (deleted = 1 AND seq <= ?) ORDER BY seq LIMIT ?
                    """
            ),
            arguments: [partition, start.position, start.horizon, scan]
        )
        while let row = try rows.next() {
            var record = Self.record(from: row, withData: false)
            record.writtenBy = row[8]
            record.writtenMutation = row[9]
            record.writtenSeq = row[10]
            guard builder.offer(record, seq: row[6], size: row[11], data: { row[5] }) else { break }
        }
    }
}
