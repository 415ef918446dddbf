/// Lets one push per user at a time into the database from this process.
///
/// A user's pushes run one at a time anyway (they take the user's row lock). Waiting here,
/// in memory, instead of at the lock keeps a user's burst from holding every pooled
/// connection while it waits, which would leave other users and the health check none.
actor UserPushQueue {
    /// Users with a push under way, and the pushes waiting behind it in arrival order.
    private var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]

    /// Runs `body` once every earlier push of `userID` in this process has finished.
    nonisolated func run<T: Sendable>(for userID: String, _ body: () async throws -> T) async throws -> T {
        await enter(userID)
        do {
            let value = try await body()
            await leave(userID)
            return value
        } catch {
            await leave(userID)
            throw error
        }
    }

    private func enter(_ userID: String) async {
        guard waiting[userID] != nil else {
            waiting[userID] = []
            return
        }
        await withCheckedContinuation { waiting[userID, default: []].append($0) }
    }

    private func leave(_ userID: String) {
        guard var queue = waiting[userID], !queue.isEmpty else {
            waiting[userID] = nil
            return
        }
        let next = queue.removeFirst()
        waiting[userID] = queue
        next.resume()
    }
}
