import FerryProtocol
import FerryServer
import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md "Spaces": management, roles, pushes and pulls across spaces, on both engines.
@Suite("Spaces", .timeLimit(.minutes(3)))
struct SpaceTests {
    @Test("management answers every row of the table: create, list, members, grant, demote, leave, delete", arguments: StorageBackend.allCases)
    func management(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            let carol = try await TestServer.token(for: "carol")
            // Create: 201 the first time, 200 for its admin again, 409 for anyone else.
            let created = try await server.createSpace("team-42", token: alice)
            #expect(created.status == 201)
            let membership = try created.decode(Membership.self)
            #expect(membership.withoutIncarnation == Membership(space: "team-42", role: .admin) && membership.incarnation != nil)
            #expect(try await server.createSpace("team-42", token: alice).status == 200)
            let taken = try await server.createSpace("team-42", token: bob)
            #expect(taken.status == 409 && taken.errorCode == "space_exists", "\(taken.errorMessage ?? "")")
            // Strangers learn nothing: 404 to everything but create.
            for reply in [
                try await server.members(of: "team-42", token: bob),
                try await server.deleteSpace("team-42", token: bob),
                try await server.grant(.read, to: "bob", in: "team-42", token: bob),
                try await server.removeMember("alice", from: "team-42", token: bob),
            ] {
                #expect(reply.status == 404 && reply.errorCode == "not_found", "\(reply.status) \(reply.errorMessage ?? "")")
                #expect(reply.errorMessage?.contains("team-42") == true)
            }
            // The admin grants; members see the members; only admins manage.
            let granted = try await server.grant(.write, to: "bob", in: "team-42", token: alice)
            #expect(granted.status == 200)
            #expect(try granted.decode(SpaceMember.self) == SpaceMember(user: "bob", role: .write))
            #expect(try await server.grant(.read, to: "carol", in: "team-42", token: alice).status == 200)
            let members = try await server.members(of: "team-42", token: carol).decode(MemberList.self).members
            #expect(
                members == [
                    SpaceMember(user: "alice", role: .admin), SpaceMember(user: "bob", role: .write), SpaceMember(user: "carol", role: .read),
                ]
            )
            let notAdmin = try await server.grant(.admin, to: "bob", in: "team-42", token: bob)
            #expect(notAdmin.status == 403 && notAdmin.errorCode == "forbidden", "\(notAdmin.errorMessage ?? "")")
            #expect(try await server.deleteSpace("team-42", token: bob).status == 403)
            #expect(try await server.removeMember("carol", from: "team-42", token: bob).status == 403)
            // The last admin can neither leave nor be demoted; with a second admin both may.
            let leave = try await server.removeMember("alice", from: "team-42", token: alice)
            #expect(leave.status == 409 && leave.errorCode == "last_admin", "\(leave.errorMessage ?? "")")
            let demote = try await server.grant(.read, to: "alice", in: "team-42", token: alice)
            #expect(demote.status == 409 && demote.errorCode == "last_admin")
            #expect(try await server.grant(.admin, to: "bob", in: "team-42", token: alice).status == 200)
            #expect(try await server.grant(.write, to: "alice", in: "team-42", token: alice).status == 200)
            // A member leaves by themself; removing someone who is not a member is 404.
            #expect(try await server.removeMember("carol", from: "team-42", token: carol).status == 204)
            #expect(try await server.removeMember("carol", from: "team-42", token: bob).status == 404)
            // Lists are sorted.
            #expect(try await server.createSpace("a-first", token: alice).status == 201)
            let list = try await server.listSpaces(token: alice).decode(SpaceList.self).spaces
            #expect(list.withoutIncarnations == [Membership(space: "a-first", role: .admin), Membership(space: "team-42", role: .write)])
            // Delete: admins only; then it is gone for everyone, and its id is free again.
            #expect(try await server.deleteSpace("team-42", token: bob).status == 204)
            #expect(try await server.listSpaces(token: alice).decode(SpaceList.self).spaces.map(\.space) == ["a-first"])
            #expect(try await server.members(of: "team-42", token: bob).status == 404)
            #expect(try await server.createSpace("team-42", token: carol).status == 201)
        }
    }

    @Test(
        "with the rate limiter on, a stranger's request about a space is 404 not_found, as without it, not a 405",
        arguments: StorageBackend.allCases
    )
    func strangerIsNotFoundUnderRateLimit(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend, rateLimit: RateLimitPolicy(requests: 1000, window: .seconds(60))) { server in
            try await server.makeSpace("team-42", admin: "alice")
            let mallory = try await TestServer.token(for: "mallory")
            for reply in [
                try await server.members(of: "team-42", token: mallory), try await server.deleteSpace("team-42", token: mallory),
                try await server.removeMember("alice", from: "team-42", token: mallory),
                try await server.grant(.write, to: "mallory", in: "team-42", token: mallory),
            ] {
                #expect(reply.status == 404 && reply.errorCode == "not_found", "\(reply.status) \(reply.errorMessage ?? "")")
                #expect(reply.errorMessage?.contains("team-42") == true, "the handler's message, not the router's")
            }
            // A path the router does not know is still 404, and a known one with the wrong method 405.
            #expect(try await server.send(.GET, "/v1/nothing-here", token: mallory).status == 404)
            #expect(try await server.send(.POST, "/v1/spaces", token: mallory).status == 405)
        }
    }

    @Test(
        "bad input is a 400 naming the field: an invalid space id, an unknown role, a body that is not the object",
        arguments: StorageBackend.allCases
    )
    func badInput(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            for id in ["Team", "-lead", String(repeating: "a", count: 65), "a%20b", "caf%C3%A9"] {
                let reply = try await server.createSpace(id, token: alice)
                #expect(reply.status == 400 && reply.errorMessage?.hasPrefix("space") == true, "\(id): \(reply.errorMessage ?? "")")
            }
            #expect(try await server.createSpace("team", token: alice).status == 201)
            for body in [#"{"role":"owner"}"#, "[]", #"{"rôle":"read"}"#, "not json"] {
                let reply = try await server.send(.PUT, "/v1/spaces/team/members/bob", token: alice, body: Data(body.utf8))
                #expect(reply.status == 400 && reply.errorMessage?.contains("role") == true, "\(body): \(reply.errorMessage ?? "")")
            }
            let noUser = try await server.send(.PUT, "/v1/spaces/team/members/%01x", token: alice, body: Data(#"{"role":"read"}"#.utf8))
            #expect(noUser.status == 400 && noUser.errorMessage?.hasPrefix("user") == true, "\(noUser.errorMessage ?? "")")
            let method = try await server.send(.POST, "/v1/spaces/team", token: alice)
            #expect(method.status == 405 && method.headers["Allow"].first == "PUT, DELETE")
            // A mutation naming an invalid space is rejected alone.
            let pushed = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [
                        Mutation(id: 1, entity: "e", entityID: "x", op: .upsert, data: .value(1), space: "Bad Id"),
                        .upsert(id: 2, entity: "e", entityID: "y", data: .value(2)),
                    ]
                ),
                token: alice
            )
            #expect(pushed.results.map(\.status) == [.rejected, .applied])
            #expect(pushed.results[0].error?.hasPrefix("space") == true)
        }
    }

    @Test(
        "members share a space's records while personal ids stay apart; readers and strangers are refused per mutation and the rest applies; a resend is answered alike",
        arguments: StorageBackend.allCases
    )
    func sharedRecords(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            try await server.makeSpace("team", admin: "alice", members: ["bob": .write, "carol": .read])
            let (alice, bob, carol, dave) = (
                try await TestServer.token(for: "alice"), try await TestServer.token(for: "bob"), try await TestServer.token(for: "carol"),
                try await TestServer.token(for: "dave")
            )
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "a",
                    mutations: [
                        Mutation(id: 1, entity: "projects", entityID: "p1", op: .upsert, data: .value(1), space: "team"),
                        .upsert(id: 2, entity: "projects", entityID: "p1", data: .value(100)),
                    ]
                ),
                token: alice
            )
            // Bob edits the same record in the space, with the version he pulled.
            let bobs = try await server.pullAll(token: bob)
            #expect(bobs["team:projects/p1"]?.version == 1)
            #expect(bobs["projects/p1"] == nil, "Alice's personal p1 is hers alone")
            let edit = try await server.pushOK(
                PushRequest(
                    clientID: "b",
                    mutations: [Mutation(id: 1, entity: "projects", entityID: "p1", op: .upsert, data: .value(2), baseVersion: 1, space: "team")]
                ),
                token: bob
            )
            #expect(edit.results.map(\.status) == [.applied] && edit.results[0].version == 2)
            let batch = PushRequest(
                clientID: "c",
                mutations: [
                    Mutation(id: 1, entity: "projects", entityID: "p2", op: .upsert, data: .value(3), space: "team"),
                    .upsert(id: 2, entity: "notes", entityID: "n", data: .value(4)),
                    Mutation(id: 3, entity: "projects", entityID: "p3", op: .upsert, data: .value(5), space: "nowhere"),
                ]
            )
            let refused = try await server.pushOK(batch, token: carol)
            #expect(refused.results.map(\.status) == [.rejected, .applied, .rejected])
            #expect(refused.results.map(\.code) == ["forbidden", nil, "forbidden"])
            #expect(refused.results[0].error?.contains("team") == true && refused.results[0].error?.contains("read") == true)
            #expect(refused.results[2].error?.contains("nowhere") == true)
            #expect(refused.lastMutationID == 3)
            #expect(try await server.pushOK(batch, token: carol) == refused, "the resend is answered alike")
            let stranger = try await server.pushOK(
                PushRequest(clientID: "d", mutations: [Mutation(id: 1, entity: "projects", entityID: "p1", op: .delete, space: "team")]),
                token: dave
            )
            #expect(stranger.results[0].status == .rejected && stranger.results[0].code == "forbidden")
            // Everyone who reads the space sees one p1 at version 2; strangers see nothing of it.
            for token in [alice, bob, carol] {
                let records = try await server.pullAll(token: token)
                #expect(records["team:projects/p1"]?.version == 2 && records["team:projects/p1"]?.data == .value(2))
                #expect(records["team:projects/p2"] == nil)
            }
            #expect(try await server.pullAll(token: alice)["projects/p1"]?.data == .value(100))
            #expect(try await server.pullAll(token: dave).isEmpty)
            let page = try await server.pullOK(token: carol)
            #expect(page.spaces?.withoutIncarnations == [Membership(space: "team", role: .read)])
        }
    }

    @Test("natural keys are unique per space: the same key merges within a space and is apart across spaces", arguments: StorageBackend.allCases)
    func naturalKeysPerSpace(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            try await server.makeSpace("one", admin: "alice")
            try await server.makeSpace("two", admin: "alice")
            let alice = try await TestServer.token(for: "alice")
            func upsert(_ id: Int64, _ entityID: String, space: String?) -> Mutation {
                Mutation(id: id, entity: "aliases", entityID: entityID, op: .upsert, data: .value(id), naturalKey: "main-st", space: space)
            }
            let answer = try await server.pushOK(
                PushRequest(
                    clientID: "c",
                    mutations: [upsert(1, "a", space: "one"), upsert(2, "b", space: "two"), upsert(3, "c", space: nil), upsert(4, "d", space: "one")]
                ),
                token: alice
            )
            #expect(answer.results.map(\.status) == [.applied, .applied, .applied, .merged])
            #expect(answer.results[3].entityID == "a")
        }
    }

    @Test(
        "joining brings the whole space from an old cursor; leaving is reported once; a re-grant brings it whole again; deleting a space revokes every member",
        arguments: StorageBackend.allCases
    )
    func joinAndLeave(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            try await server.makeSpace("team", admin: "alice")
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "a",
                    mutations: (1...30).map { Mutation(id: $0, entity: "projects", entityID: "p\($0)", op: .upsert, data: .value($0), space: "team") }
                        + [Mutation(id: 31, entity: "projects", entityID: "p1", op: .delete, space: "team")]
                ),
                token: alice
            )
            _ = try await server.pushOK(
                PushRequest(clientID: "b", mutations: [.upsert(id: 1, entity: "notes", entityID: "n", data: .value(1))]),
                token: bob
            )
            let before = try await server.pullOK(token: bob)
            #expect(before.changes.count == 1 && before.spaces == [], "a pull without a cursor always says the memberships")
            #expect(try await server.grant(.read, to: "bob", in: "team", token: alice).status == 200)
            // From the old cursor: every live record of the space, no tombstone, in pages of 7.
            var cursor = before.cursor
            var seen: [String] = []
            var told: [[Membership]?] = []
            repeat {
                let page = try await server.pullOK(token: bob, cursor: cursor, limit: 7)
                seen += page.changes.map { "\($0.space ?? "-"):\($0.entityID):\($0.op.rawValue)" }
                cursor = page.cursor
                told.append(page.spaces)
                if !page.hasMore { break }
            } while true
            #expect(told.first??.withoutIncarnations == [Membership(space: "team", role: .read)], "the page after the grant says the memberships")
            #expect(told.dropFirst().allSatisfy { $0 == nil }, "pages after it leave them out: unchanged since their cursor")
            #expect(seen.sorted() == (2...30).map { "team:p\($0):upsert" }.sorted())
            // Revoked: reported once, with the cursor that covered the space.
            #expect(try await server.removeMember("bob", from: "team", token: alice).status == 204)
            let left = try await server.pullOK(token: bob, cursor: cursor)
            #expect(left.revoked == ["team"] && left.spaces == [] && left.changes.isEmpty)
            #expect(try await server.pullOK(token: bob, cursor: cursor).revoked == ["team"], "a lost answer is reported again")
            #expect(try await server.pullOK(token: bob, cursor: left.cursor).revoked.isEmpty)
            // A re-grant brings the whole space again.
            #expect(try await server.grant(.write, to: "bob", in: "team", token: alice).status == 200)
            let back = try await server.pullOK(token: bob, cursor: left.cursor)
            #expect(back.changes.count == 29 && back.changes.allSatisfy { $0.space == "team" })
            // Deleting the space revokes it for every member.
            #expect(try await server.deleteSpace("team", token: alice).status == 204)
            #expect(try await server.pullOK(token: bob, cursor: back.cursor).revoked == ["team"])
            // Created again under the same id, it is another space: revoked and brought whole.
            try await server.makeSpace("team", admin: "alice", members: ["bob": .read])
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "a",
                    mutations: [Mutation(id: 40, entity: "projects", entityID: "new", op: .upsert, data: .value(1), space: "team")]
                ),
                token: alice
            )
            let again = try await server.pullOK(token: bob, cursor: back.cursor)
            #expect(again.revoked == ["team"])
            #expect(again.changes.map(\.entityID) == ["new"])
        }
    }

    @Test(
        "a join over several pages leaves none of the client's own writes out: a space deleted and created again brings back what the device pushed into the new one (second review)",
        arguments: StorageBackend.allCases
    )
    func joinKeepsOwnWritesOnEveryPage(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            try await server.makeSpace("room", admin: "alice", members: ["dan": .write])
            let alice = try await TestServer.token(for: "alice")
            let dan = try await TestServer.token(for: "dan")
            let before = try await server.pullOK(token: dan)
            #expect(try await server.deleteSpace("room", token: alice).status == 204)
            try await server.makeSpace("room", admin: "alice", members: ["dan": .write])
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "alice",
                    mutations: (1...10).map {
                        Mutation(id: Int64($0), entity: "tasks", entityID: "a\($0)", op: .upsert, data: .value(1), space: "room")
                    }
                ),
                token: alice
            )
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "dan-phone",
                    mutations: [Mutation(id: 1, entity: "tasks", entityID: "mine", op: .upsert, data: .value(2), space: "room")]
                ),
                token: dan
            )
            var cursor = before.cursor
            var seen: [String] = []
            repeat {
                let page = try await server.pullOK(token: dan, cursor: cursor, limit: 4, ownWrites: ("dan-phone", "1"))
                seen += page.changes.map(\.entityID)
                cursor = page.cursor
                if !page.hasMore { break }
            } while true
            #expect(seen.sorted() == ((1...10).map { "a\($0)" } + ["mine"]).sorted(), "the join brings the device's own write too")
        }
    }

    @Test(
        "a service token administers every space, writes to spaces it is not a member of, and pulls only its own",
        arguments: StorageBackend.allCases
    )
    func serviceToken(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let service = try await TestServer.token(for: "backend", service: true)
            let alice = try await TestServer.token(for: "alice")
            #expect(try await server.createSpace("company", token: service).status == 201)
            #expect(try await server.members(of: "company", token: service).decode(MemberList.self).members.isEmpty)
            #expect(try await server.grant(.read, to: "alice", in: "company", token: service).status == 200)
            let pushed = try await server.pushOK(
                PushRequest(
                    clientID: "import",
                    mutations: (1...5).map {
                        Mutation(id: $0, entity: "aliases", entityID: "a\($0)", op: .upsert, data: .value($0), space: "company")
                    }
                ),
                token: service
            )
            #expect(pushed.results.allSatisfy { $0.status == .applied })
            #expect(try await server.pullAll(token: alice).keys.sorted() == (1...5).map { "company:aliases/a\($0)" })
            let own = try await server.pullOK(token: service)
            #expect(own.changes.isEmpty && own.spaces == [])
            // Alice only reads: her write is refused; the service's is not. A user's space is the service's to manage.
            try await server.makeSpace("alices", admin: "alice")
            #expect(try await server.grant(.read, to: "bob", in: "alices", token: service).status == 200)
            #expect(try await server.deleteSpace("alices", token: service).status == 204)
            #expect(try await server.deleteSpace("company", token: alice).status == 403)
        }
    }

    @Test("a user may be in 1,000 spaces; the next grant or creation is 409 too_many_spaces", arguments: StorageBackend.allCases)
    func spaceLimit(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let service = try await TestServer.token(for: "backend", service: true)
            try await server.database.execute(
                backend == .sqlite
                    ? """
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
                    INSERT INTO spaces (id) SELECT 's' || i FROM n
                    """
                    : "INSERT INTO spaces (id) SELECT 's' || i FROM generate_series(1, 1000) i"
            )
            try await server.database.execute("INSERT INTO space_members (space_key, user_id, role) SELECT key, 'alice', 'read' FROM spaces")
            #expect(try await server.createSpace("extra", token: service).status == 201)
            let grant = try await server.grant(.read, to: "alice", in: "extra", token: service)
            #expect(grant.status == 409 && grant.errorCode == "too_many_spaces", "\(grant.errorMessage ?? "")")
            let create = try await server.createSpace("mine", token: try await TestServer.token(for: "alice"))
            #expect(create.status == 409 && create.errorCode == "too_many_spaces")
            let page = try await server.pullOK(token: try await TestServer.token(for: "alice"))
            #expect(page.spaces?.count == 1000)
            let again = try await server.pullOK(token: try await TestServer.token(for: "alice"), cursor: page.cursor)
            #expect(again.spaces == nil, "unchanged memberships are not sent again")
        }
    }
}

/// What an empty pull costs a user in many spaces: the same statements as for one.
@Suite("Spaces: an empty pull's statements", .timeLimit(.minutes(2)))
struct SpaceEmptyPullTests {
    final class Statements: @unchecked Sendable {
        // @unchecked: `count` is only touched under `lock`.
        private let lock = NSLock()
        private var count = 0
        func add() { lock.withLock { count += 1 } }
        func take() -> Int {
            lock.withLock {
                defer { count = 0 }
                return count
            }
        }
    }

    @Test("a role the server does not know is refused by its storage too, and changes nothing (SQLite; the rule is SpaceRules')")
    func unknownRoleRefused() async throws {
        let storage = try SQLiteSyncStorage(path: nil)
        let service = Caller(userID: "backend", isService: true)
        _ = try await storage.createSpace("crew", by: service)
        _ = try await storage.setRole(.write, of: "bob", in: "crew", by: service)
        await #expect(throws: ProtocolViolation.self) {
            _ = try await storage.setRole(SpaceRole(tolerating: "owner"), of: "bob", in: "crew", by: service)
        }
        #expect(try await storage.members(of: "crew", by: service).first { $0.user == "bob" }?.role == .write)
    }

    @Test("an empty pull of a user in 1,000 spaces runs the same statements as one of a user in a single space (SQLite)")
    func sameStatements() async throws {
        let statements = Statements()
        let storage = try SQLiteSyncStorage(path: nil) { _ in statements.add() }
        let service = Caller(userID: "backend", isService: true)
        _ = try await storage.createSpace("single", by: service)
        _ = try await storage.setRole(.read, of: "one", in: "single", by: service)
        for index in 0..<1000 {
            _ = try await storage.createSpace("s\(index)", by: service)
            _ = try await storage.setRole(.read, of: "many", in: "s\(index)", by: service)
        }
        _ = try await storage.push(
            caller: service,
            clientID: "seed",
            mutations: [IncomingMutation(Mutation(id: 1, entity: "e", entityID: "x", op: .upsert, data: .value(1), space: "s7"))]
        )
        var counts: [String: Int] = [:]
        var cursors: [String: String] = [:]
        for user in ["one", "many"] {
            var page = try await storage.pull(userID: user, cursor: nil, limit: 1000, ownWrites: nil)
            while page.hasMore { page = try await storage.pull(userID: user, cursor: page.cursor, limit: 1000, ownWrites: nil) }
            _ = statements.take()
            let empty = try await storage.pull(userID: user, cursor: page.cursor, limit: 1000, ownWrites: nil)
            counts[user] = statements.take()
            cursors[user] = empty.cursor
            #expect(empty.count == 0 && empty.spaces == nil && !empty.hasMore)
        }
        #expect(counts["one"] == counts["many"], "\(counts)")
        // A push into one of the 1,000 spaces is found by the next pull.
        _ = try await storage.push(
            caller: service,
            clientID: "seed",
            mutations: [IncomingMutation(Mutation(id: 2, entity: "e", entityID: "y", op: .upsert, data: .value(2), space: "s900"))]
        )
        let next = try await storage.pull(userID: "many", cursor: cursors["many"], limit: 1000, ownWrites: nil)
        let changes = try JSONDecoder().decode(PullResponse.self, from: Data(next.responseBody().readableBytesView)).changes
        #expect(changes.map { "\($0.space ?? "-"):\($0.entityID)" } == ["s900:y"])
        try await storage.close()
    }
}
