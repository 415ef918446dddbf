import FerryProtocol
import Hummingbird
import Synchronization

/// Lets each user have at most `limit` requests in progress in this process; the next is
/// answered `429` with `Retry-After` before its body is read. A quota counts requests over a
/// minute; this bounds what one user holds at any instant (bodies in memory, database
/// connections, the writer), whatever each request costs.
struct UserConcurrencyMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let limit: Int
    let metrics: ServerMetrics
    /// Requests in progress by user, keyed by the id's bytes; a user with none has no entry.
    private let inProgress = Counts()

    private final class Counts: Sendable {
        let byUser = Mutex<[ExactKey: Int]>([:])
    }

    init(limit: Int, metrics: ServerMetrics) {
        self.limit = limit
        self.metrics = metrics
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let userID = context.userID else { return try await next(request, context) }
        let key = ExactKey(userID)
        let admitted = inProgress.byUser.withLock { counts in
            guard counts[key, default: 0] < limit else { return false }
            counts[key, default: 0] += 1
            return true
        }
        guard admitted else {
            metrics.recordRateLimited(reason: "concurrency")
            var error = FerryHTTPError(
                .rateLimited,
                "\(limit) requests of this user are already in progress on this server; send one at a time, retry after 1 s"
            )
            error.headers[.retryAfter] = "1"
            throw error
        }
        defer {
            inProgress.byUser.withLock { counts in
                counts[key, default: 1] -= 1
                if counts[key] == 0 { counts[key] = nil }
            }
        }
        return try await next(request, context)
    }
}
