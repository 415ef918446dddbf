import FerryProtocol
import FerryTestSupport
import Testing

@testable import FerryServer

/// `UserLine`: what keeps one user's pulls to one share of the server (`ferry bench --only
/// fairness` measures what that buys another member).
@Suite("User line", .timeLimit(.minutes(1)))
struct UserLineTests {
    @Test("a user's second request waits for the first; another user's runs at once; the line keeps arrival order")
    func oneAtATimePerUser() async throws {
        let line = UserLine()
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let order = Log()
        let first = Task {
            try await line.run(for: "bob") {
                await order.add("bob 1 in")
                for await _ in release { break }
                await order.add("bob 1 out")
            }
        }
        while await order.entries != ["bob 1 in"] { await Task.yield() }
        let second = Task { try await line.run(for: "bob") { await order.add("bob 2") } }
        while await line.waiting(for: "bob") < 1 { await Task.yield() }
        let third = Task { try await line.run(for: "bob") { await order.add("bob 3") } }
        while await line.waiting(for: "bob") < 2 { await Task.yield() }
        // Another user is not held by bob's line.
        try await line.run(for: "alice") { await order.add("alice") }
        #expect(await order.entries == ["bob 1 in", "alice"])
        releasing.yield()
        try await first.value
        try await second.value
        try await third.value
        #expect(await order.entries == ["bob 1 in", "alice", "bob 1 out", "bob 2", "bob 3"])
        #expect(await line.waiting(for: "bob") == 0)
    }

    @Test("user ids are told apart by their bytes, as the database does: two spellings of one name are two users")
    func usersByBytes() async throws {
        let line = UserLine()
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let order = Log()
        let composed = Task {
            try await line.run(for: "caf\u{E9}") {
                await order.add("composed in")
                for await _ in release { break }
            }
        }
        while await order.entries.isEmpty { await Task.yield() }
        try await line.run(for: "cafe\u{301}") { await order.add("decomposed") }
        #expect(await order.entries == ["composed in", "decomposed"])
        releasing.yield()
        try await composed.value
    }

    @Test("a waiter cancelled leaves the line; the one behind it still gets its turn")
    func cancelledWaiterLeaves() async throws {
        let line = UserLine()
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let order = Log()
        let first = Task {
            try await line.run(for: "bob") {
                await order.add("first")
                for await _ in release { break }
            }
        }
        while await order.entries.isEmpty { await Task.yield() }
        let cancelled = Task { try await line.run(for: "bob") { await order.add("cancelled") } }
        while await line.waiting(for: "bob") < 1 { await Task.yield() }
        let next = Task { try await line.run(for: "bob") { await order.add("next") } }
        while await line.waiting(for: "bob") < 2 { await Task.yield() }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(await line.waiting(for: "bob") == 1)
        releasing.yield()
        try await first.value
        try await next.value
        #expect(await order.entries == ["first", "next"])
    }

    private actor Log {
        var entries: [String] = []
        func add(_ entry: String) { entries.append(entry) }
    }
}

/// The pull line through HTTP: what leaves it, whatever a pull's end.
@Suite("Pull line", .timeLimit(.minutes(2)))
struct PullLineTests {
    @Test(
        "pulls of one user that fail (a bad cursor, a bad limit) leave the line; the user's next pulls, from two devices at once, are answered",
        arguments: StorageBackend.allCases
    )
    func failuresLeaveTheLine(backend: StorageBackend) async throws {
        try await TestServer.run(backend: backend) { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(clientID: "phone", mutations: [Mutation(id: 1, entity: "notes", entityID: "n1", op: .upsert, data: .value(1))]),
                token: token
            )
            // Four at once: the user's cap, all in the line together.
            let failed = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<4 {
                    group.addTask {
                        index % 2 == 0
                            ? try await server.pull(token: token, cursor: "not-a-cursor").status
                            : try await server.send(.GET, "/v1/pull?limit=0", token: token).status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(failed.sorted() == [400, 400, 400, 400])
            let pages = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<2 { group.addTask { try await server.pullOK(token: token).changes.count } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(pages == [1, 1])
        }
    }
}
