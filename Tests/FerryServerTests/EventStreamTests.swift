import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

@testable import FerryServer

/// PROTOCOL.md "Live changes": `GET /v1/events` on both engines, over loopback HTTP.
@Suite("Event stream", .timeLimit(.minutes(2)))
struct EventStreamTests {
    static func upsert(_ id: Int64, _ entityID: String, space: String? = nil) -> Mutation {
        Mutation(id: id, entity: "notes", entityID: entityID, op: .upsert, data: .value(id), space: space)
    }

    @Test(
        "ready at once, then a change for the user's other device, a shared space and a membership; never another user's",
        arguments: StorageBackend.allCases
    )
    func readyAndChanges(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            let stream = try await EventStreamProbe.open(server.baseURL, token: alice, client: "phone")
            #expect(stream.status == 200)
            #expect(stream.headers["content-type"] == "text/event-stream")
            #expect(try await stream.next() == .event("ready"))

            // Alice's laptop writes her personal space: her phone's stream hears it.
            _ = try await server.pushOK(PushRequest(clientID: "laptop", mutations: [Self.upsert(1, "n1")]), token: alice)
            #expect(try await stream.next() == .event("change"))

            // Bob writes his own space: nothing for Alice (the next thing she hears is her grant).
            _ = try await server.pushOK(PushRequest(clientID: "bob-phone", mutations: [Self.upsert(1, "b1")]), token: bob)
            try await server.makeSpace("team", admin: "bob", members: ["alice": .read])
            #expect(try await stream.next() == .event("change"))

            // Bob writes the space Alice reads: she hears it, whoever wrote it.
            _ = try await server.pushOK(PushRequest(clientID: "bob-phone", mutations: [Self.upsert(2, "t1", space: "team")]), token: bob)
            #expect(try await stream.next() == .event("change"))
            // Nothing more is owed: a stream that heard Bob's personal push would have one more.
            try await Task.sleep(for: .milliseconds(300))
            #expect(await stream.pending.isEmpty)
            // Bob deletes the space: every member's memberships changed.
            #expect(try await server.deleteSpace("team", token: bob).status == 204)
            #expect(try await stream.next() == .event("change"))
            await stream.close()
        }
    }

    @Test("a grant committed while the stream opens is never lost: the stream hears the space's next write", arguments: StorageBackend.allCases)
    func grantWhileOpening(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let bob = try await TestServer.token(for: "bob")
            for round in 1...30 {
                let space = "race-\(round)"
                #expect(try await server.createSpace(space, token: bob).status == 201)
                async let granted = server.grant(.read, to: "alice", in: space, token: bob)
                let stream = try await EventStreamProbe.open(server.baseURL, token: alice, client: "phone")
                #expect(try await granted.status == 200)
                #expect(try await stream.next() == .event("ready"))
                // The grant's own event, if the stream heard it, has come by now (past the coalescing interval).
                try await Task.sleep(for: .milliseconds(150))
                _ = await stream.drain()
                // Whatever the order of the grant and the opening, the next write to the space wakes the stream.
                let mutation = Self.upsert(Int64(round), "r\(round)", space: space)
                _ = try await server.pushOK(PushRequest(clientID: "bob-phone", mutations: [mutation]), token: bob)
                #expect(try await stream.next(within: .seconds(5)) == .event("change"), "round \(round)")
                await stream.close()
            }
        }
    }

    @Test("a client's own push does not wake its own stream; another client's of the same user does", arguments: StorageBackend.allCases)
    func ownPushIsSilent(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let alice = try await TestServer.token(for: "alice")
            let phone = try await EventStreamProbe.open(server.baseURL, token: alice, client: "phone")
            let laptop = try await EventStreamProbe.open(server.baseURL, token: alice, client: "laptop")
            #expect(try await phone.next() == .event("ready"))
            #expect(try await laptop.next() == .event("ready"))
            _ = try await server.pushOK(PushRequest(clientID: "phone", mutations: [Self.upsert(1, "n1")]), token: alice)
            #expect(try await laptop.next() == .event("change"))
            try await Task.sleep(for: .milliseconds(300))
            let heard = await phone.pending
            #expect(heard.isEmpty, "the phone's own push woke its stream: \(heard)")
            // A push that changes nothing (a resend) wakes nobody.
            _ = try await server.pushOK(PushRequest(clientID: "laptop", mutations: [Self.upsert(1, "n1")]), token: alice)
            #expect(try await phone.next() == .event("change"))
            _ = try await server.pushOK(PushRequest(clientID: "laptop", mutations: [Self.upsert(1, "n1")]), token: alice)
            try await Task.sleep(for: .milliseconds(300))
            #expect(await phone.pending.isEmpty, "a resend that changed nothing woke a stream")
            await phone.close()
            await laptop.close()
        }
    }

    @Test("a burst of pushes is a few events, at most one per coalescing interval", arguments: StorageBackend.allCases)
    func burstCoalesces(backend: StorageBackend) async throws {
        var live = LiveChanges.Configuration()
        live.coalescingInterval = .milliseconds(200)
        try await TestServer.run(backend: backend, live: live) { server in
            let alice = try await TestServer.token(for: "alice")
            let stream = try await EventStreamProbe.open(server.baseURL, token: alice, client: "phone")
            #expect(try await stream.next() == .event("ready"))
            let started = ContinuousClock.now
            for id in 1...50 {
                _ = try await server.pushOK(PushRequest(clientID: "laptop", mutations: [Self.upsert(Int64(id), "n\(id)")]), token: alice)
            }
            let elapsed = started.duration(to: .now)
            try await Task.sleep(for: .milliseconds(500))
            let changes = await stream.pending.filter { $0 == .event("change") }.count
            // One at once, then at most one per 200 ms of the burst, and one for the end of it.
            #expect(changes >= 1)
            #expect(changes <= Int(elapsed / .milliseconds(200)) + 2, "\(changes) events for 50 pushes in \(elapsed)")
            await stream.close()
        }
    }

    @Test("keep-alive comments while quiet; the stream ends when the token expires", arguments: StorageBackend.allCases)
    func keepAliveAndExpiry(backend: StorageBackend) async throws {
        var live = LiveChanges.Configuration()
        live.keepAliveInterval = .milliseconds(500)
        try await TestServer.run(backend: backend, live: live) { server in
            let token = try await TestServer.token(for: "alice", ttl: .seconds(3))
            let stream = try await EventStreamProbe.open(server.baseURL, token: token)
            #expect(try await stream.next() == .event("ready"))
            #expect(try await stream.next(within: .seconds(3)) == .comment)
            var rest: [EventStreamProbe.Item] = []
            while rest.last != .ended { rest.append(try await stream.next(within: .seconds(5))) }
            #expect(rest.dropLast().allSatisfy { $0 == .comment }, "\(rest)")
        }
    }

    @Test("refused without a valid token (401, no stream); the 17th stream of a user is 429 with Retry-After", arguments: StorageBackend.allCases)
    func refusals(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let none = try await EventStreamProbe.open(server.baseURL, token: nil)
            #expect(none.status == 401)
            #expect(String(decoding: await none.refusal(), as: UTF8.self).contains("unauthorized"))
            let expired = try await TestServer.token(for: "alice", now: Date().addingTimeInterval(-7200))
            #expect(try await EventStreamProbe.open(server.baseURL, token: expired).status == 401)
            let bad = try await EventStreamProbe.open(server.baseURL, token: try await TestServer.token(for: "alice"), client: "bad id!")
            #expect(bad.status == 400)

            let alice = try await TestServer.token(for: "alice")
            var streams: [EventStreamProbe] = []
            for _ in 1...16 {
                let stream = try await EventStreamProbe.open(server.baseURL, token: alice)
                #expect(stream.status == 200)
                #expect(try await stream.next() == .event("ready"))
                streams.append(stream)
            }
            let seventeenth = try await EventStreamProbe.open(server.baseURL, token: alice)
            #expect(seventeenth.status == 429)
            #expect(seventeenth.headers["retry-after"] == "\(EventStreamController.retryAfterSeconds)")
            #expect(String(decoding: await seventeenth.refusal(), as: UTF8.self).contains("rate_limited"))
            // Another user is not held back by Alice's streams.
            #expect(try await EventStreamProbe.open(server.baseURL, token: try await TestServer.token(for: "bob")).status == 200)
            // A stream that closes makes room.
            await streams.removeFirst().close()
            var reopened = 429
            for _ in 1...200 where reopened == 429 {
                try await Task.sleep(for: .milliseconds(20))
                let stream = try await EventStreamProbe.open(server.baseURL, token: alice)
                reopened = stream.status
                await stream.close()
            }
            #expect(reopened == 200)
            for stream in streams { await stream.close() }
        }
    }

    @Test(
        "a client that resets the connection right after asking for a stream gives its slot back: 300 resets later the user still opens streams",
        arguments: StorageBackend.allCases
    )
    func resetsReleaseTheirSlots(backend: StorageBackend) async throws {
        var live = LiveChanges.Configuration()
        live.maxStreamsPerUser = 4
        try await TestServer.run(backend: backend, live: live) { server in
            let alice = try await TestServer.token(for: "alice")
            let port = HostileClientTests.port(of: server)
            try await HostileClientTests.offThread {
                for _ in 1...300 {
                    let connection = try HostileClientTests.RawConnection(port: port)
                    connection.send("GET /v1/events HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(alice)\r\nAccept: text/event-stream\r\n\r\n")
                    connection.reset()
                }
            }
            // Every reset's slot is back once the server has seen it go: four streams open.
            var opened: [EventStreamProbe] = []
            for _ in 1...500 where opened.count < 4 {
                let stream = try await EventStreamProbe.open(server.baseURL, token: alice)
                if stream.status == 200 { opened.append(stream) } else { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(opened.count == 4)
            for stream in opened { await stream.close() }
        }
    }

    @Test("opening a stream counts as one request for the rate limit")
    func countsForTheRateLimit() async throws {
        try await TestServer.run(rateLimit: RateLimitPolicy(requests: 2, window: .seconds(60))) { server in
            let alice = try await TestServer.token(for: "alice")
            let first = try await EventStreamProbe.open(server.baseURL, token: alice)
            #expect(first.status == 200 && first.headers["ratelimit-remaining"] == "1")
            let second = try await EventStreamProbe.open(server.baseURL, token: alice)
            #expect(second.status == 200)
            #expect(try await EventStreamProbe.open(server.baseURL, token: alice).status == 429)
            await first.close()
            await second.close()
        }
    }
}

/// `LiveChanges`, the index that decides which streams a signal wakes, driven directly.
@Suite("Live changes hub")
struct LiveChangesTests {
    @Test("a signal wakes exactly the streams that may read it, never its writer's own; flags gather until taken")
    func wakesOnlyReaders() throws {
        let live = LiveChanges()
        let far = Date().addingTimeInterval(3600)
        let phone = try #require(live.open(user: "alice", client: "phone", spaces: ["team"], expiresAt: far))
        let laptop = try #require(live.open(user: "alice", client: "laptop", spaces: ["team"], expiresAt: far))
        let bob = try #require(live.open(user: "bob", client: "phone", spaces: [], expiresAt: far))
        let carol = try #require(live.open(user: "carol", client: nil, spaces: ["team"], expiresAt: far))
        let none = LiveChanges.Wake()
        let change = LiveChanges.Wake(change: true)

        live.publish([.personal(user: "alice", writer: .init(user: "alice", client: "phone"))])
        #expect(live.take(phone.id) == none)
        #expect(live.take(laptop.id) == change)
        #expect(live.take(bob.id) == none)
        #expect(live.take(carol.id) == none)

        // Bob's client is also called "phone": his writes are not Alice's phone's.
        live.publish([.space("team", writer: .init(user: "bob", client: "phone"))])
        #expect([phone, laptop, carol].map { live.take($0.id) } == [change, change, change])
        #expect(live.take(bob.id) == none)

        live.publish([.memberships(user: "bob")])
        #expect(live.take(bob.id) == LiveChanges.Wake(change: true, memberships: true))
        live.setSpaces(["team"], of: bob.id)
        live.setSpaces([], of: carol.id)
        live.publish([.space("team", writer: nil)])
        #expect(live.take(bob.id) == change)
        #expect(live.take(carol.id) == none)

        live.publish([.everything])
        #expect([phone, laptop, bob, carol].allSatisfy { live.take($0.id).change })
        live.close(carol.id)
        #expect(live.take(carol.id).end)
        #expect(live.openStreams == 3)
    }

    @Test("a user's streams are capped; keep-alives go to quiet streams only; expired tokens end their streams")
    func limitsAndTicks() throws {
        var configuration = LiveChanges.Configuration()
        configuration.maxStreamsPerUser = 2
        let live = LiveChanges(configuration: configuration)
        let now = Date()
        let first = try #require(live.open(user: "alice", client: nil, spaces: [], expiresAt: now.addingTimeInterval(60)))
        let second = try #require(live.open(user: "alice", client: nil, spaces: [], expiresAt: now.addingTimeInterval(10)))
        #expect(live.open(user: "alice", client: nil, spaces: [], expiresAt: now.addingTimeInterval(60)) == nil)
        live.tick(now: .now + .seconds(16), date: now.addingTimeInterval(16))
        #expect(live.take(first.id) == LiveChanges.Wake(keepAlive: true))
        #expect(live.take(second.id).end)
        live.wrote(first.id)
        live.tick(now: .now + .seconds(1), date: now.addingTimeInterval(17))
        #expect(live.take(first.id) == LiveChanges.Wake())
        live.close(second.id)
        #expect(live.open(user: "alice", client: nil, spaces: [], expiresAt: now.addingTimeInterval(60)) != nil)
    }

    @Test("users are told apart by their bytes: a composed and a decomposed 'zoë' have a cap each and never wake each other")
    func usersByBytes() throws {
        var configuration = LiveChanges.Configuration()
        configuration.maxStreamsPerUser = 1
        let live = LiveChanges(configuration: configuration)
        let far = Date().addingTimeInterval(3600)
        let composed = "zo\u{EB}"
        let decomposed = "zoe\u{308}"
        #expect(composed == decomposed, "Swift calls them equal; the database does not")
        let first = try #require(live.open(user: composed, client: nil, spaces: [], expiresAt: far))
        let second = try #require(live.open(user: decomposed, client: nil, spaces: [], expiresAt: far), "a cap of its own")
        live.publish([.personal(user: composed, writer: nil)])
        #expect(live.take(first.id).change)
        #expect(live.take(second.id) == LiveChanges.Wake())
        live.publish([.memberships(user: decomposed)])
        #expect(live.take(first.id) == LiveChanges.Wake())
        #expect(live.take(second.id).memberships)
        live.close(first.id)
        live.close(second.id)
        #expect(live.openStreams == 0)
    }
}
