/// `work` did not finish within `limit`.
package struct TimeLimitExceeded: Error, Sendable, CustomStringConvertible {
    package let limit: Duration
    package var description: String { "timed out after \(limit)" }
}

/// Runs `work` against `limit` on `clock` (no limit when `nil`) and returns its result, or throws
/// `TimeLimitExceeded` when the limit passes first. The loser is cancelled. The work runs in a task
/// of its own and, unless `awaitingCancelledWork`, is not awaited once the limit passed or the
/// caller was cancelled (the caller then gets `CancellationError`): work stuck where cancellation
/// does not reach cannot hold the caller. With `awaitingCancelledWork`, cancelled work has
/// finished unwinding (a sync has put its batch back) when this returns.
package func withTimeLimit<T: Sendable>(
    _ limit: Duration?,
    clock: any Clock<Duration>,
    awaitingCancelledWork: Bool = false,
    _ work: @escaping @Sendable () async throws -> T
) async throws -> T {
    let (outcomes, sink) = AsyncStream.makeStream(of: Result<T, any Error>.self)
    let running = Task {
        do { sink.yield(.success(try await work())) } catch { sink.yield(.failure(error)) }
    }
    let timer = limit.map { limit in
        Task {
            guard (try? await clock.sleep(for: limit)) != nil else { return }
            sink.yield(.failure(TimeLimitExceeded(limit: limit)))
        }
    }
    var iterator = outcomes.makeAsyncIterator()
    // nil: the caller was cancelled while waiting.
    let first = await iterator.next() ?? .failure(CancellationError())
    running.cancel()
    timer?.cancel()
    if awaitingCancelledWork { await running.value }
    return try first.get()
}
