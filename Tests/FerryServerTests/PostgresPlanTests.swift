import FerryProtocol
import FerryTestSupport
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import FerryServer

/// PostgreSQL's plans for a push's lookup and a pull's page stay index walks after a bulk load
/// has made the statistics stale (autovacuum off, so nothing refreshes them).
@Suite("PostgreSQL plans", .timeLimit(.minutes(3)))
struct PostgresPlanTests {
    @Test("after a bulk load with stale statistics, a push's lookup stays index probes and a pull page walks records_pull to its limit")
    func plansAfterBulkLoad() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try #require(try await database.open() as? PostgresSyncStorage)
        try await database.execute("ALTER TABLE records SET (autovacuum_enabled = off)")
        // Statistics taken while Alice had ten records: they say her records are few and their positions small.
        _ = try await storage.push(
            userID: "alice",
            clientID: "phone",
            mutations: (1...10).map { IncomingMutation(.upsert(id: $0, entity: "docs", entityID: "early-\($0)", data: .value($0))) }
        )
        try await database.execute("ANALYZE records")
        // The bulk load: 200,000 of her records at once.
        try await database.execute(
            """
            INSERT INTO records (user_id, entity, entity_id, version, deleted, natural_key, data, seq)
            SELECT 'alice', 'docs', 'd-' || i, 1, false, 'k-' || i, convert_to('{"value":1}', 'UTF8'), 100 + i
            FROM generate_series(1, 200000) i
            """
        )
        try await database.execute("UPDATE user_changes SET position = 200100 WHERE user_id = 'alice'")

        let pull = PostgresSyncStorage.pullQuery(userID: "alice", cursor: PullCursor(position: 100_000), scan: 501)
        let keys = (0..<1000).map { RecordKey(entity: "docs", entityID: "d-\($0 * 97)") }
        let naturalKeys = (0..<1000).map { NaturalKeyRef(entity: "docs", naturalKey: "k-\($0 * 89)") }
        let load = PostgresSyncStorage.loadQuery(keys: keys, naturalKeys: naturalKeys, userID: "alice")

        // Without Ferry's plan settings, a plain session on the same statistics (the decay this guards against).
        let plain = try await TestPostgres.withConnection(to: location) { connection in
            var plans: [String] = []
            for query in [pull, load] {
                var lines: [String] = []
                for try await line in try await connection.query(
                    PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds),
                    logger: Logger(label: "test")
                ).decode(String.self) {
                    lines.append(line)
                }
                plans.append(lines.joined(separator: "\n"))
            }
            return plans
        }
        // The control: these statistics are stale enough to matter (a hash join over all her records).
        #expect(plain[1].contains("Hash Join") || plain[1].contains("Seq Scan"), "a plain session's lookup:\n\(plain[1])")

        let pullPlan = try await storage.plan(of: pull)
        #expect(pullPlan.contains("Index Scan using records_pull on records"), "\(pullPlan)")
        #expect(pullPlan.contains("Limit"), "\(pullPlan)")
        for decayed in ["Seq Scan", "Bitmap", "Sort"] { #expect(!pullPlan.contains(decayed), "\(pullPlan)") }

        let loadPlan = try await storage.plan(of: load)
        #expect(loadPlan.contains("Nested Loop"), "\(loadPlan)")
        #expect(loadPlan.contains("Index Scan using records_pkey on records"), "\(loadPlan)")
        #expect(loadPlan.contains("Index Scan using records_live_natural_key on records"), "\(loadPlan)")
        for decayed in ["Seq Scan", "Bitmap", "Hash Join", "Merge Join"] { #expect(!loadPlan.contains(decayed), "\(loadPlan)") }

        // And the statements return what they should on those plans.
        let page = try await storage.pull(userID: "alice", cursor: nil, limit: 1000, ownWrites: nil)
        #expect(page.count == 1000 && page.hasMore)
        try await storage.close()
    }
}
