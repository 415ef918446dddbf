import FerryProtocol
import Hummingbird

/// Charges each authenticated request to its user and stamps the `RateLimit-*`
/// headers on every response, errors included; over the limit it answers 429.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let limiter: any RateLimiter
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let userID = context.userID else { return try await next(request, context) }
        let decision = try await limiter.acquire(for: userID)
        guard decision.allowed else {
            metrics.recordRateLimited()
            var error = FerryHTTPError(
                .rateLimited,
                "rate limit of \(decision.limit) requests exceeded; retry after \(decision.retryAfterSeconds) s"
            )
            error.headers.append(contentsOf: decision.headers)
            error.headers[.retryAfter] = "\(decision.retryAfterSeconds)"
            throw error
        }
        do {
            var response = try await next(request, context)
            response.headers.append(contentsOf: decision.headers)
            return response
        } catch {
            var httpError = FerryHTTPError(error, context: context)
            httpError.headers.append(contentsOf: decision.headers)
            throw httpError
        }
    }
}
