import FerryProtocol
import FerryServer
import FerryTestSupport
import FerryTesting
import Foundation
import GRDB
import Testing

@testable import Ferry

@Suite("Upload", .timeLimit(.minutes(1)))
struct UploadTests {
    @Test(
        "5,000 queued events in batches of 500, 167 already on the server by natural key, 300/min: ≤10 pushes, no 429, re-keyed, nothing left, progress at every push"
    )
    func fiveThousandEvents() async throws {
        try await TestServer.run(rateLimit: .default) { server in
            let token = try await TestServer.token(for: "alice")
            // Another device already uploaded 167 of the samples, under its own ids.
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "other-device",
                    mutations: (0..<167).map {
                        .upsert(
                            id: Int64($0 + 1),
                            entity: "events",
                            entityID: "server-\($0)",
                            data: ["kind": .string("steps"), "value": .integer(0)],
                            naturalKey: "hk:\($0 * 30)"
                        )
                    }
                ),
                token: token
            )

            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<5000 {
                    try db.execute(
                        sql: "INSERT INTO events (id, kind, value, hk) VALUES (?, 'steps', ?, ?)",
                        arguments: ["local-\(index)", index, "hk:\(index)"]
                    )
                }
            }
            let transport = CountingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            // The batch size of DESIGN.md's story (the default is the protocol's most, 1,000).
            var configuration = SyncConfiguration()
            configuration.batchSize = 500
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: configuration)
            let updates = await client.statusUpdates()
            let observed = Task {
                var progress: [Int] = []
                for await status in updates {
                    if case .uploading(let done, _) = status.phase, progress.last != done { progress.append(done) }
                    if case .idle = status.phase, status.lastSyncedAt != nil { break }
                }
                return progress
            }
            let report = try await client.sync()
            let progress = await observed.value

            #expect(transport.count("/v1/push") <= 10)
            #expect(report.rateLimited == 0)
            #expect(report.upload.merged == 167)
            #expect(report.upload.rekeyed == 167)
            #expect(await client.status.pending == 0)
            #expect(progress.count >= 10, "progress steps: \(progress)")
            #expect(progress.count >= transport.count("/v1/push"), "progress steps: \(progress)")
            #expect(progress.last == 5000)
            let local = try await store.database.read { db in try String.fetchSet(db, sql: "SELECT id FROM events") }
            #expect(local.count == 5000)
            #expect(local.contains("server-5"))  // hk:150 was merged into server-5
            #expect(!local.contains("local-150"))
            let remote = try await server.pullAll(token: token)
            #expect(remote.count == 5000)
            #expect(remote.values.allSatisfy { $0.version <= 2 })
        }
    }

    @Test("pacing from RateLimit-* headers: 3,000 events in batches of 100 under 10 requests a minute meet no 429")
    func pacing() async throws {
        let clock = VirtualClock()
        let limiter = TokenBucketRateLimiter(policy: RateLimitPolicy(requests: 10, window: .seconds(60)), clock: clock)
        try await TestServer.run(rateLimiter: limiter) { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<3000 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
            }
            var configuration = SyncConfiguration()
            configuration.batchSize = 100
            let started = clock.now
            let report = try await ClientFixture.client(store: store, server: server, configuration: configuration, clock: clock).sync()
            #expect(report.upload.requests == 30)
            #expect(report.rateLimited == 0)
            #expect(report.upload.acknowledged == 3000)
            // 10 requests as a burst, then one every 6 s: the client waited for the quota instead of hitting it.
            let waited = started.duration(to: clock.now)
            #expect(waited >= .seconds(6 * (report.requests - 10)))
            #expect(waited <= .seconds(6 * report.requests + 60))
        }
    }

    @Test(
        "changes written during an upload grow its total as they come: every status is distinct, counts the queue exactly, and never shows 100% while changes wait"
    )
    func totalGrowsDuringUpload() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<1000 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
            }
            // At the third push the app writes 500 more.
            let transport = InterceptingTransport.hooked(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { pushes in
                guard pushes == 3 else { return }
                try await store.database.write { db in
                    for index in 1000..<1500 {
                        try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index])
                    }
                }
            }
            var configuration = SyncConfiguration()
            configuration.batchSize = 100
            let client = ClientFixture.client(store: store, server: server, transport: transport, configuration: configuration)
            let updates = await client.statusUpdates()
            let observed = Task {
                var statuses: [SyncStatus] = []
                for await status in updates {
                    statuses.append(status)
                    if case .idle = status.phase, status.lastSyncedAt != nil { break }
                }
                return statuses
            }
            let report = try await client.sync()
            let statuses = await observed.value
            #expect(report.upload.acknowledged == 1500)
            #expect(zip(statuses, statuses.dropFirst()).allSatisfy { $0 != $1 }, "no status repeats")
            let uploading = statuses.compactMap { status -> (done: Int, total: Int, pending: Int)? in
                guard case .uploading(let done, let total) = status.phase else { return nil }
                return (done, total, status.pending)
            }
            #expect(uploading.last.map { $0.done == 1500 && $0.total == 1500 } == true, "\(uploading.suffix(3))")
            #expect(uploading.allSatisfy { $0.done < $0.total || $0.pending == 0 }, "100% only with nothing waiting: \(uploading)")
            #expect(zip(uploading, uploading.dropFirst()).allSatisfy { $0.total <= $1.total && $0.done <= $1.done })
        }
    }

    @Test("sizes out of the protocol's range are taken within it: a batch size of 0 still uploads, a page size of 5,000 still pulls")
    func sizesWithinTheProtocol() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                for index in 0..<30 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
            }
            var configuration = SyncConfiguration()
            configuration.batchSize = 0
            configuration.pullPageSize = 5000
            let report = try await ClientFixture.client(store: store, server: server, configuration: configuration).sync()
            #expect(report.upload.acknowledged == 30)
            #expect(report.upload.requests == 30, "one mutation a push")
            // Another device pulls them (a device's own uploads do not come back to it).
            let other = try ClientFixture.openStore(at: ClientFixture.storePath())
            #expect(try await ClientFixture.client(store: other, server: server, configuration: configuration).sync().pull.received == 30)
        }
    }

    @Test("records of 20 KB go in batches cut by size under 4 MiB: no 413, nothing lost")
    func batchesCutBySize() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let padding = String(repeating: "x", count: 20_000)
            try await store.database.write { db in
                for index in 0..<400 { try db.execute(sql: "INSERT INTO events (id, kind) VALUES (?, ?)", arguments: ["e-\(index)", padding]) }
            }
            let transport = CountingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!))
            let report = try await ClientFixture.client(store: store, server: server, transport: transport).sync()
            #expect(report.upload.acknowledged == 400)
            #expect(report.upload.requests == 2, "about 200 records of 20 KB fit in 4 MiB")
            #expect(transport.count(status: 413) == 0)
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 400)
        }
    }

    @Test("a merge into a record this device already pulled leaves one row, holding what the server holds")
    func mergeIntoPulledRecord() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "phone",
                    mutations: [
                        .upsert(
                            id: 1,
                            entity: "events",
                            entityID: "server-1",
                            data: ["kind": .string("steps"), "value": .integer(1)],
                            naturalKey: "hk:1"
                        )
                    ]
                ),
                token: token
            )
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let client = ClientFixture.client(store: store, server: server)
            try await client.sync()
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, kind, value, hk) VALUES ('local-1', 'steps', 99, 'hk:1')")
            }
            let report = try await client.sync()
            #expect(report.upload.merged == 1)
            let rows = try await store.database.read { db in
                try Row.fetchAll(db, sql: "SELECT id, value FROM events").map { "\($0["id"] as String)=\($0["value"] as Int)" }
            }
            #expect(rows == ["server-1=99"])
            #expect(try await server.pullAll(token: token)["events/server-1"]?.data?["value"] == .integer(99))
        }
    }

    @Test("a device gives a synced record the natural key another record holds: it becomes that record on every device and the server")
    func naturalKeyGivenToSyncedRecord() async throws {
        try await TestServer.run { server in
            let phone = try ClientFixture.openStore(at: ClientFixture.storePath())
            let laptop = try ClientFixture.openStore(at: ClientFixture.storePath())
            let phoneClient = ClientFixture.client(store: phone, server: server)
            let laptopClient = ClientFixture.client(store: laptop, server: server)
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, value) VALUES ('r1', 1)")
                try db.execute(sql: "INSERT INTO events (id, value, hk) VALUES ('r5', 5, 'hk:5')")
            }
            try await phoneClient.sync()
            try await laptopClient.sync()
            try await phone.database.write { db in try db.execute(sql: "UPDATE events SET value = 7, hk = 'hk:5' WHERE id = 'r1'") }
            #expect(try await phoneClient.sync().upload.merged == 1)
            try await laptopClient.sync()

            func rows(_ store: FerryStore) async throws -> [String] {
                try await store.database.read { db in
                    try Row.fetchAll(db, sql: "SELECT id, value, hk FROM events ORDER BY id").map {
                        "\($0["id"] as String)=\($0["value"] as Int)/\($0["hk"] as String? ?? "-")"
                    }
                }
            }
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            let live = remote.values.filter { $0.op == .upsert }.map { "\($0.entityID)=\($0.data?["value"].map { "\($0)" } ?? "")" }
            #expect(live.count == 1)
            #expect(remote["events/r1"]?.op == .delete)
            #expect(try await rows(phone) == ["r5=7/hk:5"])
            #expect(try await rows(laptop) == ["r5=7/hk:5"])
        }
    }

    @Test("two rows whose ids differ only in Unicode normalization are two records on the server")
    func normalizationIsNotIdentity() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, 1), (?, 2)", arguments: ["caf\u{E9}", "cafe\u{301}"])
            }
            let report = try await ClientFixture.client(store: store, server: server).sync()
            #expect(report.upload.requests == 1)
            // Counted from the page itself: a Swift dictionary keyed by these ids would merge them.
            let changes = try await server.pullOK(token: try await TestServer.token(for: "alice")).changes
            #expect(changes.count == 2)
            #expect(Set(changes.compactMap { $0.data?["value"] }) == [.integer(1), .integer(2)])
        }
    }

    @Test("ids, natural keys and data that need escaping reach the server exactly as written locally")
    func escaping() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let id = #"quote" back\slash /é🙂"#
            let naturalKey = "line\nbreak\ttab\u{01}\"q\"\\"
            let kind = "a\n\"b\"\\c\u{1F}d ü"
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, kind, value, hk) VALUES (?, ?, 1, ?)", arguments: [id, kind, naturalKey])
            }
            let report = try await ClientFixture.client(store: store, server: server).sync()
            #expect(report.upload.acknowledged == 1)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            let change = try #require(remote["events/\(id)"], "\(remote.keys)")
            #expect(change.naturalKey == naturalKey)
            #expect(change.data == ["kind": .string(kind), "value": .integer(1)])
        }
    }

    @Test("three edits send one upsert; an insert then a delete sends nothing")
    func coalescing() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('e-1', 'steps', 1)")
                try db.execute(sql: "UPDATE events SET value = 2 WHERE id = 'e-1'")
                try db.execute(sql: "UPDATE events SET value = 3 WHERE id = 'e-1'")
                try db.execute(sql: "INSERT INTO events (id, kind, value) VALUES ('gone', 'steps', 9)")
                try db.execute(sql: "DELETE FROM events WHERE id = 'gone'")
            }
            let report = try await ClientFixture.client(store: store, server: server).sync()
            #expect(report.upload.requests == 1)
            #expect(report.upload.acknowledged == 5)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 1)
            #expect(remote["events/e-1"]?.version == 1)
            #expect(remote["events/e-1"]?.data == ["kind": .string("steps"), "value": .integer(3)])
        }
    }

    @Test("a batch that edits a record of the batch before is read again after that answer is applied, so its base version is current")
    func dependentBatches() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n1', 'first'), ('n2', 'x')")
                try db.execute(sql: "UPDATE notes SET body = 'second' WHERE id = 'n1'")
                try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('n3', 'x'), ('n4', 'x'), ('n5', 'x')")
            }
            var configuration = SyncConfiguration()
            configuration.batchSize = 2
            // Batches: [n1, n2], [n1 again, n3] (sent after the first is applied), [n4, n5]
            // (sent while the second is applied).
            let report = try await ClientFixture.client(store: store, server: server, configuration: configuration).sync()
            #expect(report.upload.requests == 3)
            #expect(report.upload.conflicts == 0)
            #expect(report.upload.acknowledged == 6)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 5)
            #expect(remote["notes/n1"]?.version == 2)
            #expect(remote["notes/n1"]?.data == ["body": .string("second")])
            #expect(
                try await store.database.read { db in
                    try Int64.fetchAll(db, sql: "SELECT version FROM ferry_versions WHERE entity = 'notes' ORDER BY entity_id")
                } == [2, 1, 1, 1, 1]
            )
        }
    }

    @Test("a delete read while the batch creating its record is on the wire is still sent")
    func deleteOfRecordInFlight() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('a', 'x'), ('b', 'x')")
                try db.execute(sql: "DELETE FROM events WHERE id = 'b'")
                try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('c', 'x')")
            }
            var configuration = SyncConfiguration()
            configuration.batchSize = 2
            // [a, b] goes out; [delete b, c] is read meanwhile, before b has a version here.
            let report = try await ClientFixture.client(store: store, server: server, configuration: configuration).sync()
            #expect(report.upload.acknowledged == 4)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.filter { $0.value.op == .upsert }.keys.sorted() == ["events/a", "events/c"])
            #expect(remote["events/b"]?.op == .delete)
        }
    }

    @Test("a rejected mutation is dead-lettered without blocking the rest, and can be discarded")
    func deadLetters() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('a', 'x')") }
            try await store.enqueue(entity: "Not-An-Entity", entityID: "z", op: .upsert, data: [:])
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, kind) VALUES ('b', 'x')") }
            let client = ClientFixture.client(store: store, server: server)
            let report = try await client.sync()
            #expect(report.upload.deadLettered == 1)
            let dead = try await client.deadLetters()
            #expect(dead.map(\.entity) == ["Not-An-Entity"])
            #expect(dead.first?.reason.contains("entity") == true)
            #expect(await client.status.deadLettered == 1)
            #expect(await client.status.pending == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(Set(remote.keys) == ["events/a", "events/b"])
            try await client.discardDeadLetters()
            #expect(try await client.deadLetters().isEmpty)
        }
    }

    @Test("the client abandoned mid-upload and reopened from its files: every mutation applied exactly once")
    func crashMidUpload() async throws {
        try await TestServer.run { server in
            let path = ClientFixture.storePath()
            do {
                let store = try ClientFixture.openStore(at: path)
                try await store.database.write { db in
                    for index in 0..<1200 { try db.execute(sql: "INSERT INTO events (id, value) VALUES (?, ?)", arguments: ["e-\(index)", index]) }
                }
                // A first batch goes out and the server commits it, then the app dies before the
                // response is applied: its entries stay "in flight" in the file.
                let lease = SyncLease(store: store, duration: 60)
                #expect(try await lease.acquire() == nil)
                let batch = try #require(try await Outbox(store: store, lease: lease).nextBatch(limit: 500))
                let sent = try await server.send(
                    .POST,
                    "/v1/push",
                    token: try await TestServer.token(for: "alice"),
                    body: batch.requestBody()
                )
                #expect(sent.status == 200)
                let inFlight = try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = 1") }
                #expect(inFlight == 500)
                // The app's process ends while it holds the store's sync lease.
                try await store.database.write { db in try db.execute(sql: "UPDATE ferry_lease SET pid = ?", arguments: [try deadProcessID()]) }
            }
            let reopened = try ClientFixture.openStore(at: path)
            let report = try await ClientFixture.client(store: reopened, server: server).sync()
            #expect(report.upload.acknowledged == 1200)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.count == 1200)
            #expect(remote.values.allSatisfy { $0.version == 1 }, "a resent mutation was applied twice")
        }
    }
}

@Suite("A push body too slow for the link", .timeLimit(.minutes(1)))
struct SlowPushTests {
    @Test("a batch answered 408 is halved until it passes; a lone mutation answered 408 stays queued, never a dead letter")
    func halvesOn408() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            let real = URLSessionTransport(baseURL: URL(string: server.baseURL)!)
            try await store.database.write { db in
                for index in 0..<12 {
                    try db.execute(
                        sql: "INSERT INTO notes (id, body) VALUES (?, ?)",
                        arguments: ["n-\(index)", String(repeating: "x", count: 100_000)]
                    )
                }
            }
            // About 300 KB per request passes: batches of 2 notes.
            let client = ClientFixture.client(store: store, server: server, transport: InterceptingTransport.slowLink(passing: 300_000, before: real))
            let report = try await client.sync()
            #expect(report.upload.acknowledged == 12 && report.upload.deadLettered == 0, "\(report.upload)")
            #expect(try await server.pullAll(token: try await TestServer.token(for: "alice")).count == 12)

            // A single note that is too big for the link: queued still, and the run's pull still
            // brings another device's change.
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO notes (id, body) VALUES ('big', ?)", arguments: [String(repeating: "y", count: 200_000)])
            }
            _ = try await server.pushOK(
                PushRequest(clientID: "other", mutations: [.upsert(id: 1, entity: "notes", entityID: "theirs", data: ["body": .string("hi")])]),
                token: try await TestServer.token(for: "alice")
            )
            let slow = ClientFixture.client(store: store, server: server, transport: InterceptingTransport.slowLink(passing: 100_000, before: real))
            let stuck = try await slow.sync()
            #expect(stuck.upload.acknowledged == 0 && stuck.pull.applied == 1, "\(stuck)")
            let states = try await store.database.read { db in
                try Row.fetchAll(db, sql: "SELECT state FROM ferry_outbox WHERE state != 3").map { $0[0] as Int }
            }
            let snapshot = try await QueueSnapshot.read(from: store)
            #expect(states == [0] && snapshot.deadLetters.isEmpty, "pending, not a dead letter: \(states)")
            try await store.close()
        }
    }
}
