import FerryProtocol
import HTTPTypes
import Hummingbird

/// Outermost handler of failures: turns every error into the JSON envelope,
/// answers a known path with the wrong method as 405, and stamps the request id.
struct ErrorEnvelopeMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    /// Methods each known path accepts, to tell 405 from 404.
    let routes: [String: HTTPRequest.Method]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            var httpError = FerryHTTPError(error, context: context)
            if httpError.code == .notFound {
                httpError = notFound(request)
            }
            response = try httpError.response(from: request, context: context)
        }
        response.headers[.requestID] = context.id
        return response
    }

    private func notFound(_ request: Request) -> FerryHTTPError {
        var path = request.uri.path
        if path.count > 1, path.hasSuffix("/") { path.removeLast() }
        guard let allowed = routes[path] else {
            return FerryHTTPError(.notFound, "no endpoint at \(path.prefix(200)); see docs/PROTOCOL.md in the Ferry repository for the endpoints")
        }
        var error = FerryHTTPError(.methodNotAllowed, "\(path) accepts \(allowed.rawValue) only, not \(request.method.rawValue)")
        error.headers[.allow] = allowed.rawValue
        return error
    }
}

extension HTTPField.Name {
    static let requestID = HTTPField.Name("X-Request-ID")!
}
