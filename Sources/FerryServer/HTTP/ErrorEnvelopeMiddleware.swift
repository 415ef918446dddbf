import FerryProtocol
import HTTPTypes
import Hummingbird

/// Outermost handler of failures: turns every error into the JSON envelope,
/// answers a known path with the wrong method as 405, and stamps the request id.
struct ErrorEnvelopeMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    /// Methods each known path accepts, to tell 405 from 404; `{name}` matches one segment.
    let routes: [String: [HTTPRequest.Method]]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            var httpError = FerryHTTPError(error, context: context)
            // A 404 of a handler (a space not revealed) keeps its message; the router's says the path is unknown.
            if httpError.noRoute {
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
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        let route = routes.first { pattern, _ in
            let parts = pattern.split(separator: "/", omittingEmptySubsequences: false)
            return parts.count == segments.count
                && zip(parts, segments).allSatisfy { part, segment in part == segment || (part.hasPrefix("{") && !segment.isEmpty) }
        }
        guard let (_, allowed) = route else {
            return FerryHTTPError(.notFound, "no endpoint at \(path.prefix(200)); see docs/PROTOCOL.md in the Ferry repository for the endpoints")
        }
        let methods = allowed.map(\.rawValue).joined(separator: ", ")
        var error = FerryHTTPError(.methodNotAllowed, "\(path.prefix(200)) accepts \(methods) only, not \(request.method.rawValue)")
        error.headers[.allow] = methods
        return error
    }
}

extension HTTPField.Name {
    static let requestID = HTTPField.Name("X-Request-ID")!
}
