/// The `code` of an error envelope, as listed in PROTOCOL.md.
public enum ErrorCode: String, Sendable, Codable, CaseIterable {
    case badRequest = "bad_request"
    case invalidCursor = "invalid_cursor"
    case unauthorized
    case notFound = "not_found"
    case methodNotAllowed = "method_not_allowed"
    case batchTooLarge = "batch_too_large"
    case rateLimited = "rate_limited"
    case `internal`
    case unavailable

    /// The HTTP status that always accompanies this code.
    public var httpStatus: Int {
        switch self {
        case .badRequest, .invalidCursor: 400
        case .unauthorized: 401
        case .notFound: 404
        case .methodNotAllowed: 405
        case .batchTooLarge: 413
        case .rateLimited: 429
        case .internal: 500
        case .unavailable: 503
        }
    }
}

/// The body of every 4xx and 5xx response: `{"error": {"code": …, "message": …}}`.
public struct ErrorEnvelope: Sendable, Codable, Equatable {
    public struct Detail: Sendable, Codable, Equatable {
        /// Kept as a string so a client can read codes a newer server introduces.
        public var code: String
        public var message: String
    }

    public var error: Detail

    public init(code: ErrorCode, message: String) {
        self.error = Detail(code: code.rawValue, message: message)
    }

    public var code: ErrorCode? { ErrorCode(rawValue: error.code) }
}
