import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

@Suite("Concurrency", .timeLimit(.minutes(1)))
struct ConcurrencyTests {
    /// Several clients push overlapping records while another pulls incrementally the
    /// whole time. Once the pushers stop and the puller catches up, the puller must hold
    /// every record at its final version: no change skipped, however commits interleaved.
    @Test("concurrent pushers and a concurrent puller: the puller ends with every record at its final version", arguments: StorageBackend.allCases)
    func pushersAndPuller(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let pushers = 4
            let batches = 15
            let finished = Flag()

            async let pulled: [String: Change] = {
                var held: [String: Change] = [:]
                var cursor: String?
                var caughtUpAfterStop = false
                while !caughtUpAfterStop {
                    let stopped = await finished.isSet  // read before the pull: that pull then sees every push
                    var hasMore = true
                    while hasMore {
                        let page = try await server.pullOK(token: token, cursor: cursor, limit: 37)
                        for change in page.changes { held["\(change.entity)/\(change.entityID)"] = change }
                        cursor = page.cursor
                        hasMore = page.hasMore
                    }
                    caughtUpAfterStop = stopped
                }
                return held
            }()

            try await withThrowingTaskGroup(of: Void.self) { group in
                for pusher in 0..<pushers {
                    group.addTask {
                        var generator = SystemRandomNumberGenerator()
                        for batch in 1...batches {
                            let mutations: [Mutation] = (0..<20).map { index in
                                let id = Int64(batch * 100 + index)
                                let record = "r-\(Int.random(in: 0..<60, using: &generator))"
                                return index % 7 == 6
                                    ? .delete(id: id, entity: "items", entityID: record)
                                    : .upsert(id: id, entity: "items", entityID: record, data: ["by": .integer(Int64(pusher)), "at": .integer(id)])
                            }
                            _ = try await server.pushOK(PushRequest(clientID: "pusher-\(pusher)", mutations: mutations), token: token)
                        }
                    }
                }
                try await group.waitForAll()
            }
            await finished.set()
            let held = try await pulled
            let final = try await server.pullAll(token: token)
            #expect(final.count > 40, "the pushers wrote most of the 60 records")
            #expect(held.count == final.count)
            for (key, change) in final {
                #expect(held[key] == change, "puller holds \(String(describing: held[key])) for \(key), server has \(change)")
            }
        }
    }
}

actor Flag {
    private(set) var isSet = false
    func set() { isSet = true }
}
