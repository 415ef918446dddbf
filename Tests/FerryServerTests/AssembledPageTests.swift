import FerryProtocol
import FerryTestSupport
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Testing

@testable import FerryServer

/// PostgreSQL's pull statement decides a page and writes its JSON itself (`pullQuery`): whatever
/// the history (tombstones, the client's own answered writes, rows larger than what is left of
/// the budget, ids that JSON must escape), its page is the one `PullPage.Builder` makes offered
/// the same rows one by one, as the server did before the database assembled pages.
@Suite("PostgreSQL assembles a pull page", .timeLimit(.minutes(3)))
struct AssembledPageTests {
    static let logger = Logger(label: "test")

    /// One row of `records`, as the test wrote it: the record and its position.
    typealias Row = (record: StoredRecord, seq: Int64)

    @Test("500 random reads: the same changes, bytes of data, position and end as the builder fed row by row")
    func sameAsTheBuilder() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try #require(try await database.open() as? PostgresSyncStorage)
        var random = SeededGenerator(seed: 54)
        let ids = ["plain", "with \"quotes\"", "back\\slash", "é-ü-漢", "tab\there", "ctl\u{1}x", "slash/", "a"]
        let space = SpacePartition.name(7)
        var rows: [String: [Row]] = ["alice": [], space: []]
        for (partition, writer) in [("alice", "phone"), (space, SpacePartition.writer(clientID: "phone", userID: "alice"))] {
            var seq: Int64 = 0
            for index in 0..<300 {
                seq += Int64.random(in: 1...3, using: &random)
                let deleted = Int.random(in: 0..<6, using: &random) == 0
                let mine = Int.random(in: 0..<3, using: &random) == 0
                let record = StoredRecord(
                    entity: ["docs", "notes"].randomElement(using: &random)!,
                    entityID: "\(ids.randomElement(using: &random)!)-\(index)",
                    version: Int64.random(in: 1...9, using: &random),
                    deleted: deleted,
                    naturalKey: Bool.random(using: &random) ? nil : "key \"\(index)\"",
                    data: deleted ? nil : Data("{\"v\":\"\(String(repeating: "x", count: Int.random(in: 0...400, using: &random)))\"}".utf8),
                    writtenBy: mine ? writer : (Bool.random(using: &random) ? "tablet" : nil),
                    writtenMutation: Int64.random(in: 1...40, using: &random),
                    // A row moved by a server that did not record writers: its write is not the client's.
                    writtenSeq: Int.random(in: 0..<10, using: &random) == 0 ? seq - 1 : seq
                )
                rows[partition]!.append((record, seq))
            }
        }
        try await TestPostgres.withConnection(to: location) { connection in
            try await connection.query("INSERT INTO spaces (key, id) OVERRIDING SYSTEM VALUE VALUES (7, 'team \"x\"')", logger: Self.logger)
            for (partition, history) in rows {
                try await connection.query(
                    "INSERT INTO user_changes (user_id, position) VALUES (\(partition), \(history.last!.seq))",
                    logger: Self.logger
                )
                for (record, seq) in history {
                    let data = record.data.map { String(decoding: $0, as: UTF8.self) }
                    try await connection.query(
                        """
                        INSERT INTO records (user_id, entity, entity_id, version, deleted, natural_key, data, seq, written_by, written_mutation, written_seq)
                        VALUES (\(partition), \(record.entity), \(record.entityID), \(record.version), \(record.deleted), \(record.naturalKey),
                            convert_to(\(data)::text, 'UTF8'), \(seq), \(record.writtenBy), \(record.writtenMutation), \(record.writtenSeq))
                        """,
                        logger: Self.logger
                    )
                }
            }
        }

        for trial in 0..<500 {
            let inSpace = trial % 2 == 1
            let history = rows[inSpace ? space : "alice"]!
            let after = Bool.random(using: &random) ? 0 : history.randomElement(using: &random)!.seq
            let cursor = PullCursor(position: after, horizon: Bool.random(using: &random) ? 0 : Int64.random(in: 0...after + 50, using: &random))
            var answered: [ClosedRange<Int64>] = []
            var low: Int64 = 1
            while low < 40 {
                let high = low + Int64.random(in: 0...4, using: &random)
                if Bool.random(using: &random) { answered.append(low...high) }
                low = high + Int64.random(in: 2...5, using: &random)
            }
            let ownWrites =
                Bool.random(using: &random)
                ? nil : OwnWrites(clientID: inSpace ? SpacePartition.writer(clientID: "phone", userID: "alice") : "phone", answered: answered)
            let planned = PullPage.Builder(
                after: after,
                limit: Int.random(in: 1...25, using: &random),
                leavingOut: ownWrites,
                budget: [60, 300, 1_000, 5_000, ProtocolLimits.maxPullPageDataBytes].randomElement(using: &random)!,
                takesFirst: Bool.random(using: &random),
                space: inSpace ? "team \"x\"" : nil
            )
            let expected = Self.offered(history, after: cursor, to: planned)
            let query = PostgresSyncStorage.pullQuery(userID: "alice", space: inSpace ? 7 : nil, cursor: cursor, for: planned)
            let decided = try await storage.withDatabase { db in
                try await PostgresSyncStorage.snapshot(db, logger: Self.logger) { db in
                    var builder = planned
                    _ = try await PostgresSyncStorage.read(query, into: &builder, on: db, logger: Self.logger)
                    return builder
                }
            }
            let context =
                "trial \(trial): after \(cursor), limit \(planned.limit), budget \(planned.budget), takesFirst \(planned.takesFirst), \(String(describing: ownWrites))"
            #expect(decided.changes.count == expected.changes.count, "\(context)")
            #expect(decided.changes.dataBytes == expected.changes.dataBytes, "\(context)")
            #expect(decided.position == expected.position, "\(context)")
            #expect(decided.stopped == expected.stopped, "\(context)")
            #expect(try Self.changes(decided) == Self.changes(expected), "\(context)")
        }
    }

    /// The page `builder` makes of `history`'s rows after `cursor`, offered one by one as the
    /// pull statement read them before it assembled pages: `scanLimit` rows in change order,
    /// tombstones up to the horizon left out, up to the first whose data passes the budget.
    static func offered(_ history: [Row], after cursor: PullCursor, to builder: PullPage.Builder) -> PullPage.Builder {
        var builder = builder
        var running = 0
        for (record, seq) in history.filter({ $0.seq > cursor.position && !($0.record.deleted && $0.seq <= cursor.horizon) }).prefix(
            builder.scanLimit
        ) {
            let size = record.data?.count ?? 0
            running += size
            guard running - size <= builder.budget else { break }
            let fits = running <= builder.budget || (builder.takesFirst && running == size)
            guard builder.offer(record, seq: seq, size: size, fits: fits, data: { record.data }) else { break }
        }
        return builder
    }

    /// A builder's changes as the page's JSON array, parsed.
    static func changes(_ builder: PullPage.Builder) throws -> NSArray {
        var body = JSONTextWriter(capacity: 1024)
        body.raw("[")
        builder.changes.write(to: &body)
        body.raw("]")
        return try #require(try JSONSerialization.jsonObject(with: Data(body.bytes)) as? NSArray)
    }
}
