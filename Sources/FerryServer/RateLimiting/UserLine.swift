import FerryProtocol

/// Lets one request of a kind per user run at a time in this process; the others wait their
/// turn in arrival order.
///
/// Pushes: a user's pushes run one at a time anyway (they take the user's row lock). Waiting
/// here, in memory, instead of at the lock keeps a user's burst from holding every pooled
/// connection while it waits, which would leave other users and the health check none.
///
/// Pulls: a page of 4 MiB keeps a database connection or reader, and then a thread writing its
/// JSON, busy for a while. The system shares the cores between busy threads, not between
/// users: one user's four downloads at once would take four shares to another user's one.
/// In line, a user's pulls take one share, however many devices or tasks send them.
///
/// A wait ends early when its task is cancelled (for a push, the storage's deadline cancels it).
/// A pull's wait has no deadline of its own, and Hummingbird does not cancel a request whose
/// client went away: a user has at most `maxRequestsPerUser` requests in progress, so at most
/// that many pulls wait, abandoned ones included.
actor UserLine {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    /// Users with a request under way, and the requests waiting behind it in arrival order.
    /// Keyed by the user id's bytes, as the database tells users apart.
    private var waiting: [ExactKey: [Waiter]] = [:]
    private var nextID: UInt64 = 0

    /// Runs `body` once every earlier request of `userID` in this line has finished.
    nonisolated func run<T: Sendable>(for userID: String, _ body: () async throws -> T) async throws -> T {
        try await enter(userID)
        do {
            let value = try await body()
            await leave(userID)
            return value
        } catch {
            await leave(userID)
            throw error
        }
    }

    /// Requests of `userID` waiting behind the one under way.
    func waiting(for userID: String) -> Int {
        waiting[ExactKey(userID)]?.count ?? 0
    }

    private func enter(_ userID: String) async throws {
        guard waiting[ExactKey(userID)] != nil else {
            waiting[ExactKey(userID)] = []
            return
        }
        nextID += 1
        let id = nextID
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if Task.isCancelled { return continuation.resume(throwing: CancellationError()) }
                waiting[ExactKey(userID), default: []].append(Waiter(id: id, continuation: continuation))
            }
        } onCancel: {
            Task { await self.withdraw(id, of: userID) }
        }
    }

    /// A cancelled waiter leaves; one already given its turn is not found here.
    private func withdraw(_ id: UInt64, of userID: String) {
        guard let index = waiting[ExactKey(userID)]?.firstIndex(where: { $0.id == id }) else { return }
        waiting[ExactKey(userID)]?.remove(at: index).continuation.resume(throwing: CancellationError())
    }

    private func leave(_ userID: String) {
        guard var queue = waiting[ExactKey(userID)], !queue.isEmpty else {
            waiting[ExactKey(userID)] = nil
            return
        }
        let next = queue.removeFirst()
        waiting[ExactKey(userID)] = queue
        next.continuation.resume()
    }
}
