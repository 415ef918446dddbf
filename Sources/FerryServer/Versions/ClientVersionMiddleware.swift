import FerryProtocol
import HTTPTypes
import Hummingbird

/// Reads who the client is (`Ferry-Protocol`, `Ferry-App-Version`, `Ferry-Schema-Version`,
/// `Ferry-Platform`), refuses a malformed header with `400`, a client below the server's
/// ``UpdatePolicy`` with `426 update_required` (a service token never is), and notes the protocol version in the context,
/// so a handler answers only what that version knows. After authentication, as every answer
/// but a `401` is for a signed-in user; before the quota, which a refused client spends nothing of.
struct ClientVersionMiddleware: RouterMiddleware {
    typealias Context = FerryRequestContext
    let policy: UpdatePolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let client = try Self.client(request.headers)
        // A service (the app's backend, `ferry space`) is no app to update.
        if !context.isService, let (message, minimum) = policy.refusal(of: client) {
            var error = FerryHTTPError(.updateRequired, message)
            error.minimum = minimum
            throw error
        }
        var context = context
        context.protocolVersion = client.protocolVersion
        return try await next(request, context)
    }

    /// The client its headers describe; a header that is present but malformed is a `bad_request`.
    static func client(_ headers: HTTPFields) throws -> UpdatePolicy.Client {
        var client = UpdatePolicy.Client()
        if let text = headers[HTTPField.Name(ProtocolHeaders.protocolVersion)!] {
            guard let version = ProtocolVersion(text) else {
                throw FerryHTTPError(.badRequest, "\(ProtocolHeaders.protocolVersion) must be a version like 1.1, got '\(text.prefix(40))'")
            }
            guard version.major == ProtocolVersion.current.major else {
                throw FerryHTTPError(
                    .badRequest,
                    "this server speaks protocol \(ProtocolVersion.first) to \(ProtocolVersion.current); the client speaks \(version), which it cannot serve"
                )
            }
            client.protocolVersion = version
        }
        if let text = headers[HTTPField.Name(ProtocolHeaders.appVersion)!] {
            guard let version = VersionNumber(text) else {
                throw FerryHTTPError(
                    .badRequest,
                    "\(ProtocolHeaders.appVersion) must be one to four dotted whole numbers like 2.10.1, got '\(text.prefix(40))'"
                )
            }
            client.appVersion = version
        }
        if let text = headers[HTTPField.Name(ProtocolHeaders.schemaVersion)!] {
            guard let version = ProtocolHeaders.schemaVersionNumber(text) else {
                throw FerryHTTPError(.badRequest, "\(ProtocolHeaders.schemaVersion) must be a whole number from 0, got '\(text.prefix(40))'")
            }
            client.schemaVersion = version
        }
        if let text = headers[HTTPField.Name(ProtocolHeaders.platform)!] {
            guard let platform = ProtocolHeaders.platformName(text) else {
                throw FerryHTTPError(
                    .badRequest,
                    "\(ProtocolHeaders.platform) must be 1 to 32 lowercase letters, digits or '-', like ios, got '\(text.prefix(40))'"
                )
            }
            client.platform = platform
        }
        return client
    }
}
