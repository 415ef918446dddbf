import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md `GET /v1/pull`: compacted state, tombstones, pages, cursors, isolation.
@Suite("Pull", .timeLimit(.minutes(1)))
struct PullTests {
    @Test(
        "pages are compacted: a record changed five times appears once, at its latest version; a pull from scratch brings no tombstone",
        arguments: StorageBackend.allCases
    )
    func compaction(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let before = try await server.pullOK(token: token)
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: (1...5).map {
                        .upsert(id: Int64($0), entity: "events", entityID: "e-1", data: .value(Int64($0)))
                    } + [.upsert(id: 6, entity: "events", entityID: "e-2", data: .value(6)), .delete(id: 7, entity: "events", entityID: "e-2")]
                ),
                token: token
            )
            let page = try await server.pullOK(token: token, cursor: before.cursor)
            #expect(page.hasMore == false)
            #expect(
                page.changes == [
                    Change(entity: "events", entityID: "e-1", op: .upsert, version: 5, data: .value(5)),
                    Change(entity: "events", entityID: "e-2", op: .delete, version: 2),
                ]
            )
            let fresh = try await server.pullOK(token: token)
            #expect(fresh.changes == [Change(entity: "events", entityID: "e-1", op: .upsert, version: 5, data: .value(5))])
        }
    }

    @Test(
        "a page stops at its data budget, not only at limit: large records come in pages of about 4 MiB, none lost or doubled",
        arguments: StorageBackend.allCases
    )
    func pagesBoundedByBytes(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let budget = ProtocolLimits.maxPullPageDataBytes
            // 60 records of about 250 KiB (15 MB), with small ones and tombstones between them.
            let big = String(repeating: "x", count: 250 * 1024)
            var id: Int64 = 0
            for batch in 0..<6 {
                var mutations: [Mutation] = []
                for index in 0..<10 {
                    id += 1
                    mutations.append(.upsert(id: id, entity: "docs", entityID: "big-\(batch)-\(index)", data: ["body": .string(big)]))
                    id += 1
                    mutations.append(.upsert(id: id, entity: "docs", entityID: "small-\(batch)-\(index)", data: .value(id)))
                }
                id += 1
                mutations.append(.delete(id: id, entity: "docs", entityID: "small-\(batch)-0"))
                _ = try await server.pushOK(PushRequest(clientID: "c1", mutations: mutations), token: token)
            }
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            while true {
                let reply = try await server.pull(token: token, cursor: cursor, limit: 1000)
                #expect(reply.status == 200)
                let page = try reply.decode(PullResponse.self)
                pages += 1
                let dataBytes = page.changes.reduce(0) { $0 + ($1.data.map { try! ProtocolValidation.encode($0).count } ?? 0) }
                #expect(page.changes.count == 1 || dataBytes <= budget, "page \(pages) carries \(dataBytes) bytes of data")
                #expect(reply.body.count < budget + 64 * 1024, "page \(pages) is \(reply.body.count) bytes")
                #expect(!page.changes.isEmpty, "a page without a client's own writes always makes progress")
                seen += page.changes.map(\.entityID)
                cursor = page.cursor
                if !page.hasMore { break }
            }
            // 120 records less the 6 deleted, whose tombstones a pull from scratch does not bring.
            #expect(seen.count == 114 && Set(seen).count == 114, "every record once: \(seen.count) changes, \(Set(seen).count) records")
            #expect(pages >= 4, "15 MB in pages of at most 4 MiB: \(pages) pages")
        }
    }

    @Test(
        "a page past its budget on a client's own large writes ends there with hasMore: another client's change after them still comes",
        arguments: StorageBackend.allCases
    )
    func budgetAmongOwnWrites(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let start = try await server.pullOK(token: token)
            let big = String(repeating: "x", count: 250 * 1024)
            for batch in 0..<2 {
                let ids = (1...10).map { Int64(batch * 10 + $0) }
                _ = try await server.pushOK(
                    PushRequest(
                        clientID: "k",
                        mutations: ids.map { .upsert(id: $0, entity: "docs", entityID: "d\($0)", data: ["body": .string(big)]) }
                    ),
                    token: token
                )
            }
            _ = try await server.pushOK(
                PushRequest(clientID: "b", mutations: [.upsert(id: 1, entity: "docs", entityID: "z", data: .value(1))]),
                token: token
            )
            var received: [String] = []
            var cursor = start.cursor
            var pages = 0
            while pages < 50 {
                let page = try await server.pullOK(token: token, cursor: cursor, ownWrites: ("k", "1-20"))
                received += page.changes.map(\.entityID)
                cursor = page.cursor
                pages += 1
                if !page.hasMore { break }
            }
            #expect(received == ["z"], "its own 5 MB left out, the other client's change comes: \(received) in \(pages) pages")
        }
    }

    @Test(
        "strings that need escaping come back exactly as sent: quotes, backslashes, control characters, non-ASCII",
        arguments: StorageBackend.allCases
    )
    func escaping(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let entityID = #"quote" back\slash /é🙂"#
            let naturalKey = "line\nbreak\ttab\u{01}\u{1F}\"q\"\\"
            let data: JSONObject = [
                "text": .string("a\n\"b\"\\c\u{00}d"), "nested": .object(["list": .array([.integer(1), .number(2.5), .null, .bool(true)])]),
            ]
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 1, entity: "notes", entityID: entityID, data: data, naturalKey: naturalKey)
                    ]
                ),
                token: token
            )
            let page = try await server.pullOK(token: token)
            #expect(page.changes == [Change(entity: "notes", entityID: entityID, op: .upsert, version: 1, naturalKey: naturalKey, data: data)])
        }
    }

    @Test(
        "pages of `limit` changes, hasMore until the last, then an incremental pull returns exactly what changed",
        arguments: StorageBackend.allCases
    )
    func pagesAndIncrements(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: (1...25).map {
                        .upsert(id: Int64($0), entity: "items", entityID: "i-\($0)", data: .value(Int64($0)))
                    }
                ),
                token: token
            )
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            while true {
                let page = try await server.pullOK(token: token, cursor: cursor, limit: 10)
                pages += 1
                seen += page.changes.map(\.entityID)
                cursor = page.cursor
                if !page.hasMore { break }
                #expect(page.changes.count == 10)
            }
            #expect(pages == 3)
            #expect(seen == (1...25).map { "i-\($0)" })

            let nothing = try await server.pullOK(token: token, cursor: cursor)
            #expect(nothing.changes.isEmpty)
            #expect(nothing.hasMore == false)

            _ = try await server.pushOK(
                PushRequest(
                    clientID: "c1",
                    mutations: [
                        .upsert(id: 26, entity: "items", entityID: "i-3", data: .value(300)),
                        .delete(id: 27, entity: "items", entityID: "i-7"),
                        .upsert(id: 28, entity: "items", entityID: "i-26", data: .value(26)),
                    ]
                ),
                token: token
            )
            let increment = try await server.pullOK(token: token, cursor: nothing.cursor)
            #expect(increment.changes.map(\.entityID) == ["i-3", "i-7", "i-26"])
            #expect(increment.changes.map(\.op) == [.upsert, .delete, .upsert])
            #expect(increment.changes.map(\.version) == [2, 2, 1])
        }
    }

    @Test("users never see each other's data, and a cursor issued to one user is refused for another", arguments: StorageBackend.allCases)
    func isolation(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            _ = try await server.pushOK(
                PushRequest(clientID: "c", mutations: [.upsert(id: 1, entity: "notes", entityID: "shared-id", data: .value(1))]),
                token: alice
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "c", mutations: [.upsert(id: 1, entity: "notes", entityID: "shared-id", data: .value(2))]),
                token: bob
            )
            let alicePage = try await server.pullOK(token: alice)
            let bobPage = try await server.pullOK(token: bob)
            #expect(alicePage.changes.map(\.data) == [.value(1)])
            #expect(bobPage.changes.map(\.data) == [.value(2)])
            #expect(bobPage.changes.map(\.version) == [1])

            let stolen = try await server.pull(token: bob, cursor: alicePage.cursor)
            #expect(stolen.status == 400)
            #expect(stolen.errorCode == "invalid_cursor")
        }
    }

    @Test("cursors the server did not issue are refused with invalid_cursor; bad limits with bad_request", arguments: StorageBackend.allCases)
    func badParameters(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for cursor in ["abc", "c1.AAAAAAAAAAE2WpMBArq8iw2HEG_lihRN", "", "c1.%20"] {
                let reply = try await server.pull(token: token, cursor: cursor)
                #expect(reply.status == 400)
                #expect(reply.errorCode == "invalid_cursor")
            }
            for limit in ["0", "10001", "abc", "-1", "2.5"] {
                let reply = try await server.send(.GET, "/v1/pull?limit=\(limit)", token: token)
                #expect(reply.status == 400)
                #expect(reply.errorCode == "bad_request")
                #expect(reply.errorMessage?.contains("limit") == true)
            }
        }
    }

    @Test("large pages: a limit of 10,000 brings 10,000 small changes a page, the client's own writes left out", arguments: StorageBackend.allCases)
    func largePages(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for batch in 0..<12 {
                let mutations = (1...1000).map { index in
                    let id = Int64(batch * 1000 + index)
                    return Mutation.upsert(id: id, entity: "events", entityID: "e-\(id)", data: .value(id))
                }
                _ = try await server.pushOK(PushRequest(clientID: batch == 11 ? "phone" : "importer", mutations: mutations), token: token)
            }
            let first = try await server.pull(token: token, limit: 10_000)
            let page = try first.decode(PullResponse.self)
            #expect(page.changes.count == 10_000 && page.hasMore)
            // The phone's own 1,000 answered writes (ids 11,001 to 12,000) are left out of the rest.
            let rest = try await server.pull(token: token, cursor: page.cursor, limit: 10_000, ownWrites: ("phone", "11001-12000"))
            let last = try rest.decode(PullResponse.self)
            #expect(last.changes.map(\.entityID) == (10_001...11_000).map { "e-\($0)" })
            #expect(!last.hasMore)
        }
    }

    @Test("cursors survive a server restart on the same database", arguments: StorageBackend.allCases)
    func cursorsSurviveRestart(backend: StorageBackend) async throws {
        let database = try await TestDatabase.make(backend)
        let token = try await TestServer.token(for: "alice")
        let cursor = try await TestServer.run(database: database) { server in
            _ = try await server.pushOK(
                PushRequest(clientID: "c", mutations: [.upsert(id: 1, entity: "n", entityID: "1", data: .value(1))]),
                token: token
            )
            return try await server.pullOK(token: token).cursor
        }
        try await TestServer.run(database: database) { server in
            _ = try await server.pushOK(
                PushRequest(clientID: "c", mutations: [.upsert(id: 2, entity: "n", entityID: "2", data: .value(2))]),
                token: token
            )
            let page = try await server.pullOK(token: token, cursor: cursor)
            #expect(page.changes.map(\.entityID) == ["2"])
        }
    }

    @Test(
        "a client's own answered writes stay out of its pulls, page after page; another client's writes, and its own it does not name, come",
        arguments: StorageBackend.allCases
    )
    func ownWritesLeftOut(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            // The phone writes 250 records, the watch 3 between them, the phone one more (id 251).
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "phone",
                    mutations: (1...125).map { .upsert(id: Int64($0), entity: "events", entityID: "p-\($0)", data: .value(1)) }
                ),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "watch", mutations: [.upsert(id: 1, entity: "events", entityID: "w-1", data: .value(2))]),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "phone",
                    mutations: (126...250).map { .upsert(id: Int64($0), entity: "events", entityID: "p-\($0)", data: .value(1)) }
                ),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "watch",
                    mutations: [
                        .upsert(id: 2, entity: "events", entityID: "w-2", data: .value(2)),
                        // The watch edits one of the phone's records: the phone must get it back.
                        .upsert(id: 3, entity: "events", entityID: "p-7", data: .value(3)),
                    ]
                ),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [.upsert(id: 251, entity: "events", entityID: "p-251", data: .value(1))]),
                token: token
            )

            var received: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let page = try await server.pullOK(token: token, cursor: cursor, limit: 2, ownWrites: ("phone", "1-250"))
                received += page.changes.map(\.entityID)
                cursor = page.cursor
                pages += 1
                if !page.hasMore { break }
            } while pages < 100
            #expect(received == ["w-1", "w-2", "p-7", "p-251"], "the watch's writes and the phone's unanswered one, in change order")
            #expect(pages == 29, "9 rows read a page of 2: 254 rows in 29 pages")
            let p7 = try await server.pullAll(token: token)["events/p-7"]
            #expect(p7?.data == .value(3))

            // Caught up, with the last changes left out: the cursor is past them.
            #expect(try await server.pullOK(token: token, cursor: cursor, ownWrites: ("phone", "1-251")).changes.isEmpty)
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [.upsert(id: 252, entity: "events", entityID: "p-1", data: .value(9))]),
                token: token
            )
            let afterOwn = try await server.pullOK(token: token, cursor: cursor, ownWrites: ("phone", "1-252"))
            #expect(afterOwn.changes.isEmpty && !afterOwn.hasMore)
            _ = try await server.pushOK(
                PushRequest(clientID: "watch", mutations: [.delete(id: 4, entity: "events", entityID: "p-1")]),
                token: token
            )
            let afterWatch = try await server.pullOK(token: token, cursor: afterOwn.cursor, ownWrites: ("phone", "1-252"))
            #expect(afterWatch.changes.map(\.entityID) == ["p-1"])
            #expect(afterWatch.changes.first?.op == .delete)

            // Without answered, or for another client, nothing is left out (a pull from scratch
            // brings no tombstone: not p-1's).
            #expect(try await server.pullAll(token: token).count == 253)
            // Naming writes the server never applied for that client (it forgot them, or never had
            // them) is refused: the device must start over (RetentionTests).
            #expect(try await server.pull(token: token, limit: 1000, ownWrites: ("other", "1-1000")).status == 410)
        }
    }

    @Test(
        "only the ids named are left out: a copy of the store writing under the same client id with ids in between still reaches it",
        arguments: StorageBackend.allCases
    )
    func onlyNamedIDsLeftOut(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            // Two copies of one store share client id "phone": one writes id 2, the other id 3.
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [.upsert(id: 2, entity: "events", entityID: "x", data: .value(2))]),
                token: token
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [.upsert(id: 3, entity: "events", entityID: "y", data: .value(3))]),
                token: token
            )
            let page = try await server.pullOK(token: token, ownWrites: ("phone", "1,3"))
            #expect(page.changes.map(\.entityID) == ["x"], "id 2 is not named: the other copy's write comes")
        }
    }

    @Test(
        "a pull reads a bounded number of rows: 3,000 own writes before another's cost a few empty pages with hasMore, never one long read",
        arguments: StorageBackend.allCases
    )
    func leftOutRowsAreBounded(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            for push in 0..<3 {
                let mutations = (1...1000).map { (index: Int) -> Mutation in
                    let id = Int64(push * 1000 + index)
                    return .upsert(id: id, entity: "events", entityID: "p-\(id)", data: .value(1))
                }
                _ = try await server.pushOK(PushRequest(clientID: "phone", mutations: mutations), token: token)
            }
            _ = try await server.pushOK(
                PushRequest(clientID: "watch", mutations: [.upsert(id: 1, entity: "events", entityID: "w", data: .value(2))]),
                token: token
            )
            var received: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let page = try await server.pullOK(token: token, cursor: cursor, limit: 100, ownWrites: ("phone", "1-3000"))
                received += page.changes.map(\.entityID)
                cursor = page.cursor
                pages += 1
                if !page.hasMore { break }
            } while pages < 100
            #expect(received == ["w"])
            #expect(pages == 8, "401 rows read a page: 3,001 rows in 8 pages")
        }
    }

    @Test(
        "answered without a client id, or not ascending ids and ranges within bounds, is refused with bad_request",
        arguments: StorageBackend.allCases
    )
    func badAnswered(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            let missing = try await server.send(.GET, "/v1/pull?answered=3", token: token)
            #expect(missing.status == 400)
            #expect(missing.errorMessage?.contains("Ferry-Client-ID") == true)
            let tooMany = (1...1001).map { "\($0 * 2)" }.joined(separator: ",")
            for value in ["0", "-1", "abc", "", "3-1", "5,3", "1-3,3-4", "1.5", "9007199254740992", "1-", "1--2", "+3", "007", tooMany] {
                let reply = try await server.send(.GET, "/v1/pull?answered=\(value)", token: token, headers: [("Ferry-Client-ID", "phone")])
                #expect(reply.status == 400, "answered=\(value.prefix(20))")
                #expect(reply.errorMessage?.contains("answered") == true)
            }
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: (1...9).map { .upsert(id: $0, entity: "e", entityID: "r\($0)", data: .value($0)) }),
                token: token
            )
            let fine = try await server.send(.GET, "/v1/pull?answered=1-3,5,7-9", token: token, headers: [("Ferry-Client-ID", "phone")])
            #expect(fine.status == 200)
            // Ids the server never applied for that client: it forgot them (a restore), so the device starts over.
            let ahead = try await server.send(.GET, "/v1/pull?answered=1-3,5,7-10", token: token, headers: [("Ferry-Client-ID", "phone")])
            #expect(ahead.status == 410)
            let badClient = try await server.send(.GET, "/v1/pull?answered=3", token: token, headers: [("Ferry-Client-ID", "no spaces")])
            #expect(badClient.status == 400)
        }
    }
}
