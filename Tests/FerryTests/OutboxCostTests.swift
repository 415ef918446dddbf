import FerryProtocol
import GRDB
import Testing

@testable import Ferry

/// The outbox's lookups by record go through its index, whatever the queue's length: a scan per
/// batch or page made draining a million merged changes cost the square of their count.
@Suite("Outbox cost")
struct OutboxCostTests {
    @Test("finding a batch's or a page's queued entries, and moving re-keyed ones, search the index by record instead of scanning the queue")
    func lookupsByRecordUseTheIndex() async throws {
        let store = try ClientFixture.openStore(at: ClientFixture.storePath())
        let plans = try await store.database.read { db in
            let statements: [(String, StatementArguments)] = [
                (OutboxTable.queuedEntriesSQL, ["[\"e-1\",\"e-2\"]"]),
                (OutboxTable.rekeySQL(count: 2), ["events", "e-1", "s-1", "events", "e-2", "s-2", 0]),
            ]
            return try statements.map { sql, arguments in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }
            }
        }
        for plan in plans {
            #expect(plan.contains { $0.contains("USING INDEX ferry_outbox_by_record") }, "plan: \(plan)")
            #expect(!plan.contains { $0.hasPrefix("SCAN ferry_outbox") }, "plan: \(plan)")
        }
        try await store.close()
    }
}
