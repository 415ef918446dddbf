import FerryProtocol
import Hummingbird

/// Charges each authenticated request to its user and stamps the `RateLimit-*`
/// headers on every response, errors included; over the limit it answers 429. A request that
/// moved more than a MiB is charged for its bytes once answered (`RateLimitPolicy/extraCost(bytes:)`).
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
            let cost = RateLimitPolicy.extraCost(bytes: context.facts.bodyBytes + (response.body.contentLength ?? 0))
            if cost > 0 {
                do {
                    try await limiter.charge(cost, to: userID)
                } catch {
                    // The answer is ready: a quota that could not be charged only lets this user a little further.
                    context.logger.warning("could not charge a request's cost to its quota", metadata: ["error": "\(error)"])
                }
            }
            return response
        } catch {
            var httpError = FerryHTTPError(error, context: context)
            httpError.headers.append(contentsOf: decision.headers)
            throw httpError
        }
    }
}
