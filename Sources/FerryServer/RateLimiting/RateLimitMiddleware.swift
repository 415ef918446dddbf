import FerryProtocol
import Hummingbird

/// Charges each authenticated request to its user and stamps the `RateLimit-*`
/// headers on every response, errors included; over the limit it answers 429. A request that
/// moved more than a MiB is charged for its bytes once answered, refused or not
/// (`RateLimitPolicy/extraCost(bytes:)`).
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
            await charge(bytes: context.facts.bodyBytes + (response.body.contentLength ?? 0), to: userID, context: context)
            return response
        } catch {
            // Every byte read counts, whatever the answer: a refused 16 MiB upload cost its bytes
            // (issue 50), and so does a body refused before it was read, which the server still
            // reads to its end (its Content-Length) to reach the connection's next request.
            let announced = request.headers[.contentLength].flatMap(Int.init) ?? 0
            await charge(bytes: max(context.facts.bodyBytes, announced), to: userID, context: context)
            var httpError = FerryHTTPError(error, context: context)
            httpError.headers.append(contentsOf: decision.headers)
            throw httpError
        }
    }

    /// Charges the tokens `bytes` cost beyond the request's first.
    private func charge(bytes: Int, to userID: String, context: Context) async {
        let cost = RateLimitPolicy.extraCost(bytes: bytes)
        guard cost > 0 else { return }
        do {
            try await limiter.charge(cost, to: userID)
        } catch {
            // The answer is ready: a quota that could not be charged only lets this user a little further.
            context.logger.warning("could not charge a request's cost to its quota", metadata: ["error": "\(error)"])
        }
    }
}
