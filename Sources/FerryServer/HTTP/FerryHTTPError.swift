import FerryProtocol
import Foundation
import Hummingbird
import NIOHTTP1

/// Every failure, as the JSON error envelope of PROTOCOL.md with its status and headers.
struct FerryHTTPError: Error, HTTPResponseError {
    /// Seconds a client should wait before retrying after a `503`.
    static let unavailableRetryAfter = 5

    var code: ErrorCode
    var message: String
    var headers: HTTPFields = [:]
    /// The router found no route for the request (as opposed to a handler's `404`, a space not
    /// revealed): `ErrorEnvelopeMiddleware` tells 404 from 405 for these only. It survives the
    /// middlewares that classify an error on its way out (`RateLimitMiddleware`).
    var noRoute = false
    /// With `update_required`: what the server requires.
    var minimum: UpdateRequirement?

    init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Classifies any error thrown while handling a request. Bugs become `internal`
    /// and are logged with the request id that the message also carries.
    init(_ error: any Error, context: some RequestContext) {
        switch error {
        case let error as FerryHTTPError:
            self = error
        case let error as ProtocolViolation:
            self.init(error.code, error.message)
        case let error as AuthFailure:
            self.init(.unauthorized, error.description)
        case HTTPParserError.invalidEOFState:
            // The client hung up (or half-closed) before its body's Content-Length had arrived.
            self.init(.badRequest, "the connection ended before the request body was complete")
        case let error as HTTPParserError:
            self.init(.badRequest, "the request is not valid HTTP/1.1: \(error)")
        case StorageError.unavailable(let why):
            context.logger.warning("storage unavailable", metadata: ["reason": "\(why)"])
            self.init(.unavailable, "the database is unavailable; retry later")
            headers[.retryAfter] = "\(Self.unavailableRetryAfter)"
        case let error as BlobStoreUnavailable:
            context.logger.warning("attachment store unavailable", metadata: ["reason": "\(error.reason)"])
            self.init(.unavailable, "the attachment store is unavailable; retry later")
            headers[.retryAfter] = "\(Self.unavailableRetryAfter)"
        case let error as any HTTPResponseError where error.status == .contentTooLarge:
            self.init(.batchTooLarge, Self.batchTooLargeMessage)
        case let error as any HTTPResponseError where error.status == .notFound:
            self.init(.notFound, "no such endpoint")
            noRoute = true
        case let error as any HTTPResponseError where (400..<500).contains(error.status.code):
            self.init(.badRequest, "\(error.status.reasonPhrase)")
        default:
            context.logger.error("internal error", metadata: ["error": "\(String(reflecting: error))"])
            self.init(.internal, "internal server error; request id \(context.id)")
        }
    }

    static let batchTooLargeMessage =
        "the push body is larger than \(ProtocolLimits.maxPushBodyBytes) bytes (4 MiB); a push may carry at most \(ProtocolLimits.maxMutationsPerPush) mutations and 4 MiB"

    var status: HTTPResponse.Status { HTTPResponse.Status(code: code.httpStatus) }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        try JSONResponse.make(ErrorEnvelope(code: code, message: message, minimum: minimum), status: status, headers: headers)
    }
}

/// Encodes JSON bodies the same way for every response.
enum JSONResponse {
    static func make(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) throws -> Response {
        make(body: ByteBuffer(bytes: try JSONEncoder.sortedKeys().encode(value)), status: status, headers: headers)
    }

    /// A response with a body that is already JSON.
    static func make(body: ByteBuffer, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }
}
