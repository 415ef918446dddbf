import Hummingbird

/// Authenticates every request it guards and records the user in the context.
struct AuthMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let authority: TokenAuthority
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        do {
            let (caller, expiresAt) = try await authority.verify(authorization: request.headers[.authorization])
            context.userID = caller.userID
            context.isService = caller.isService
            context.tokenExpiry = expiresAt
        } catch {
            // The reason never holds the token (AuthFailure's messages do not echo it).
            context.logger.info("authentication failed", metadata: ["reason": "\(error)"])
            metrics.recordAuthenticationFailure(error)
            throw error
        }
        context.facts.user = context.userID
        context.logger[metadataKey: "user"] = "\(context.userID ?? "")"
        return try await next(request, context)
    }
}
