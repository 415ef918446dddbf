/// The `code` of an error envelope, as listed in PROTOCOL.md.
public enum ErrorCode: String, Sendable, Codable, CaseIterable {
    /// 400: the request breaks the protocol; the message says how.
    case badRequest = "bad_request"
    /// 400: the pull cursor is not one this server issued for this user; pull from the start.
    case invalidCursor = "invalid_cursor"
    /// 410: the pull cursor is older than what the server keeps (deletions before it were purged
    /// after the retention), or was read from a history the server no longer has (its database was
    /// restored from a backup): pull from the start, and drop local records that pull does not bring back.
    case cursorExpired = "cursor_expired"
    /// 403: the user already has the most client ids a user may have (`ProtocolLimits/maxClientsPerUser`);
    /// clients idle for the retention are forgotten.
    case tooManyClients = "too_many_clients"
    /// 403: the caller's role in the space does not allow the request (PROTOCOL.md, "Spaces").
    case forbidden
    /// 409: the space id belongs to a space someone else created.
    case spaceExists = "space_exists"
    /// A mutation's code only (`rejected`): the space it was made in (its `spaceIncarnation`) was
    /// deleted; a space created since under the same id is another space, and gets nothing of it.
    case spaceDeleted = "space_deleted"
    /// A mutation's code only (`rejected`): it references an attachment the caller may not read
    /// (not uploaded by them, and referenced by no record they may read). Upload it, then send the
    /// change again; never a dead letter.
    case attachmentMissing = "attachment_missing"
    /// A mutation's code only (`rejected`): the app's rule for the record's entity failed on it
    /// (a defect of the server's, logged there); the rest of the batch went on. Fix the rule,
    /// then send the change again from its dead letter.
    case ruleFailed = "rule_failed"
    /// 409: the space's last admin cannot leave or be demoted.
    case lastAdmin = "last_admin"
    /// 409: the user is already a member of ``ProtocolLimits/maxSpacesPerUser`` spaces.
    case tooManySpaces = "too_many_spaces"
    /// 401: no token, or one that is malformed, wrongly signed or expired.
    case unauthorized
    /// 404: no such route.
    case notFound = "not_found"
    /// 405: the route exists, not with this method.
    case methodNotAllowed = "method_not_allowed"
    /// 408: the request's body did not arrive within the server's body timeout; the connection is
    /// closed. Send the body at once (a resent push is still applied once).
    case requestTimeout = "request_timeout"
    /// 413: too many mutations or too many bytes in one push; send smaller batches.
    case batchTooLarge = "batch_too_large"
    /// 413: an attachment larger than the server takes (`Upload-Length` or `Content-Length`
    /// announced it, or the bytes passed it); nothing is kept.
    case attachmentTooLarge = "attachment_too_large"
    /// 409: an upload's append does not start where the upload ends; `Upload-Offset` says where.
    case uploadOffsetMismatch = "upload_offset_mismatch"
    /// 416: a `Range` outside the attachment's bytes.
    case rangeNotSatisfiable = "range_not_satisfiable"
    /// 422: the uploaded bytes do not hash to the digest they were uploaded as; nothing is kept.
    case digestMismatch = "digest_mismatch"
    /// 507: the attachment would take the user's uploads past the server's attachment quota
    /// (`--attachment-quota`); the message says their use. Nothing is kept.
    case quotaExceeded = "quota_exceeded"
    /// 429: the user's quota is spent; retry after `Retry-After` seconds.
    case rateLimited = "rate_limited"
    /// 500: the server failed on its side; retry with backoff (a resent push is still applied once).
    case `internal`
    /// 503: the server cannot serve now (storage down, shutting down); retry after `Retry-After`.
    case unavailable
    /// 426: the server serves no client below its minimum protocol, app or schema version; the
    /// envelope's `minimum` says which. The client stops sending until the app is updated.
    case updateRequired = "update_required"

    /// The HTTP status that always accompanies this code.
    public var httpStatus: Int {
        switch self {
        case .badRequest, .invalidCursor: 400
        case .unauthorized: 401
        case .notFound: 404
        case .methodNotAllowed: 405
        case .requestTimeout: 408
        case .cursorExpired: 410
        case .tooManyClients, .forbidden: 403
        case .spaceExists, .spaceDeleted, .attachmentMissing, .ruleFailed, .lastAdmin, .tooManySpaces, .uploadOffsetMismatch: 409
        case .batchTooLarge, .attachmentTooLarge: 413
        case .rangeNotSatisfiable: 416
        case .digestMismatch: 422
        case .rateLimited: 429
        case .internal: 500
        case .quotaExceeded: 507
        case .unavailable: 503
        case .updateRequired: 426
        }
    }
}

/// The body of every 4xx and 5xx response: `{"error": {"code": …, "message": …}}`.
public struct ErrorEnvelope: Sendable, Codable, Equatable {
    /// The envelope's `error` object.
    public struct Detail: Sendable, Codable, Equatable {
        /// Kept as a string so a client can read codes a newer server introduces.
        public var code: String
        /// What went wrong, written for a person.
        public var message: String
        /// Only with `update_required`: the versions the server requires.
        public var minimum: UpdateRequirement?
    }

    /// The code and message the envelope carries.
    public var error: Detail

    /// An envelope with `code` and `message`.
    public init(code: ErrorCode, message: String, minimum: UpdateRequirement? = nil) {
        self.error = Detail(code: code.rawValue, message: message, minimum: minimum)
    }

    /// The code as an `ErrorCode`; `nil` for a code this version does not know.
    public var code: ErrorCode? { ErrorCode(rawValue: error.code) }
}

/// What an `update_required` answer requires: the fields the client fell short of. An app
/// shows `message` and sends nothing more until it is updated.
public struct UpdateRequirement: Sendable, Codable, Hashable {
    /// The least protocol version the server serves, `1.1`.
    public var `protocol`: String?
    /// The least app version the server serves on the client's platform, `2.3.0`.
    public var appVersion: String?
    /// The least schema version of the app the server serves.
    public var schemaVersion: Int?
    /// In `/v1/health` only: the least app version on each platform that has one of its own,
    /// over ``appVersion`` (`{"ios": "2.3.0"}`).
    public var appVersionByPlatform: [String: String]?

    /// A requirement from its fields.
    public init(protocol: String? = nil, appVersion: String? = nil, schemaVersion: Int? = nil, appVersionByPlatform: [String: String]? = nil) {
        self.protocol = `protocol`
        self.appVersion = appVersion
        self.schemaVersion = schemaVersion
        self.appVersionByPlatform = appVersionByPlatform
    }
}
