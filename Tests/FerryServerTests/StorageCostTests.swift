import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// The hot path's shape: a push of 500 mutations is a handful of set-based statements,
/// not one read and one write per mutation. Counted, not timed.
@Suite("Storage cost", .timeLimit(.minutes(1)))
struct StorageCostTests {
    @Test("a push of 500 mutations runs a handful of statements, whether it inserts, updates or merges")
    func statementsPerPush() async throws {
        let statements = Mutex<[String]>([])
        let storage = try SQLiteSyncStorage(path: TestServer.temporaryDatabasePath()) { sql in
            statements.withLock { $0.append(sql) }
        }
        func push(_ first: Int64, entityPrefix: String, naturalKeyPrefix: String) async throws -> [String] {
            statements.withLock { $0.removeAll() }
            let mutations = (0..<500).map { index in
                IncomingMutation(
                    .upsert(
                        id: first + Int64(index),
                        entity: "events",
                        entityID: "\(entityPrefix)-\(index)",
                        data: ["value": .integer(Int64(index))],
                        naturalKey: "\(naturalKeyPrefix)-\(index)"
                    )
                )
            }
            let response = try await storage.push(userID: "u", clientID: "c", mutations: mutations)
            #expect(response.results.count == 500)
            return statements.withLock { $0 }
        }
        let inserts = try await push(1, entityPrefix: "e", naturalKeyPrefix: "k")
        let updates = try await push(501, entityPrefix: "e", naturalKeyPrefix: "k")
        let merges = try await push(1001, entityPrefix: "other", naturalKeyPrefix: "k")
        for (name, executed) in [("inserts", inserts), ("updates", updates), ("merges", merges)] {
            // A client's first push (the inserts) also counts the user's clients against their limit.
            #expect(executed.count <= (name == "inserts" ? 10 : 9), "\(name) ran \(executed.count) statements:\n\(executed.joined(separator: "\n"))")
        }
        try await storage.close()
    }
}
