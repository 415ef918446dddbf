import FerryProtocol
import FerryTestSupport
import Foundation
import Logging
import PostgresNIO
import Testing

@testable import FerryServer

/// PostgreSQL's plans for a push's lookup and a pull's page stay index walks after a bulk load
/// has made the statistics stale (autovacuum off, so nothing refreshes them), with planner
/// settings scoped to a pull's transaction, never to the pool's sessions.
@Suite("PostgreSQL plans", .timeLimit(.minutes(3)))
struct PostgresPlanTests {
    @Test("after a bulk load with stale statistics, a push's lookup stays index probes and a pull page walks records_pull to its limit")
    func plansAfterBulkLoad() async throws {
        let database = try await TestDatabase.make(.postgres)
        guard case .postgres(let location) = database.url else { return }
        let storage = try #require(try await database.open() as? PostgresSyncStorage)
        try await database.execute("ALTER TABLE records SET (autovacuum_enabled = off)")
        // Statistics taken while Alice had ten records and Carol none: they say Alice's records are
        // few and their positions small, and know nothing of Carol.
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
        try await database.execute(
            """
            INSERT INTO records (user_id, entity, entity_id, version, deleted, natural_key, data, seq)
            SELECT 'carol', 'docs', 'd-' || i, 1, false, 'k-' || i, convert_to('{"value":1}', 'UTF8'), i FROM generate_series(1, 100000) i
            """
        )

        let pull = PostgresSyncStorage.pullQuery(
            userID: "alice",
            cursor: PullCursor(position: 100_000),
            for: PullPage.Builder(after: 100_000, limit: 500, leavingOut: nil)
        )
        let keys = (0..<1000).map { RecordRef(entity: "docs", entityID: "d-\($0 * 97)") }
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
        // A plain session (no plan settings) on the same statistics: the page decays to a bitmap
        // scan of everything after the cursor and a sort (the settings are what keep it a walk);
        // the lookup's own shape (a LATERAL probe per key) keeps it probes even there.
        #expect(plain[0].contains("Bitmap") || plain[0].contains("Sort"), "a plain session's page:\n\(plain[0])")
        for decayed in ["Seq Scan", "Bitmap", "Hash"] { #expect(!plain[1].contains(decayed), "a plain session's lookup:\n\(plain[1])") }

        // The settings are the pull's own: on the pool's sessions, outside a pull, the page decays as in a plain session.
        let outsidePull = try await storage.plan(of: pull)
        #expect(outsidePull.contains("Bitmap") || outsidePull.contains("Sort"), "the page outside a pull:\n\(outsidePull)")

        let pullPlan = try await storage.plan(of: pull, inPull: true)
        #expect(pullPlan.contains("Index Scan using records_pull on records"), "\(pullPlan)")
        #expect(pullPlan.contains("Limit"), "\(pullPlan)")
        for decayed in ["Seq Scan", "Bitmap", "Sort"] { #expect(!pullPlan.contains(decayed), "\(pullPlan)") }

        // Alice's, and Carol's, whom the statistics do not know: the batch's keys walked, each probed.
        let carolsLoad = PostgresSyncStorage.loadQuery(
            keys: keys,
            naturalKeys: naturalKeys,
            userID: "carol"
        )
        for plan in [try await storage.plan(of: load), try await storage.plan(of: carolsLoad)] {
            #expect(plan.contains("Nested Loop"), "\(plan)")
            #expect(plan.contains("Function Scan on w"), "\(plan)")
            #expect(plan.contains("Index Scan using records_pkey on records"), "\(plan)")
            #expect(plan.contains("Index Scan using records_live_natural_key on records"), "\(plan)")
            for decayed in ["Seq Scan", "Bitmap", "Hash", "Merge", "Materialize", "Sort"] { #expect(!plan.contains(decayed), "\(plan)") }
        }

        // And the statements return what they should on those plans.
        let page = try await storage.pull(userID: "alice", cursor: nil, limit: 1000, ownWrites: nil)
        #expect(page.count == 1000 && page.hasMore)
        try await storage.close()
    }
}
