import FerryProtocol
import HTTPTypes
import Hummingbird
import Logging

/// One line per request, so an operator can follow one device through its day: method,
/// route, status, duration, user, client id and request id. Never a header's value, a query
/// or a body: the token, a cursor or a user's data do not belong in logs.
struct AccessLogMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        if let client = request.headers[.ferryClientID], ProtocolValidation.clientIDProblem(client) == nil {
            context.facts.client = client
        }
        do {
            let response = try await next(request, context)
            log(request, context: context, status: response.status.code, start: start)
            return response
        } catch {
            log(request, context: context, status: (error as? any HTTPResponseError)?.status.code ?? 500, start: start)
            throw error
        }
    }

    private func log(_ request: Request, context: Context, status: Int, start: ContinuousClock.Instant) {
        let elapsed = start.duration(to: .now)
        let milliseconds = elapsed.seconds * 1000
        logger.info(
            "request",
            metadata: [
                "method": "\(request.method.rawValue)",
                "route": "\(context.endpointPath ?? String(request.uri.path.prefix(100)))",
                "status": "\(status)",
                "ms": "\((milliseconds * 10).rounded() / 10)",
                "user": "\(context.facts.user ?? "-")",
                "client": "\(context.facts.client ?? "-")",
                "request_id": "\(context.id)",
            ]
        )
    }
}

extension HTTPField.Name {
    /// Optional on every request: the client id, for the access log (a push body names it anyway).
    static let ferryClientID = HTTPField.Name("Ferry-Client-ID")!
}
