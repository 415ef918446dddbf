import Hummingbird

/// Counts every request by endpoint and status and records its latency.
struct MetricsMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        metrics.recordRequest(
            endpoint: context.endpointPath ?? "unknown",
            status: response.status.code,
            duration: start.duration(to: .now)
        )
        return response
    }
}
