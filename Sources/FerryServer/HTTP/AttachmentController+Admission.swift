import FerryProtocol
import Hummingbird

/// What an upload's request may send (issue 50): within the largest attachment, the length its
/// upload announced, and the user's quota, which counts uploads in progress as well as those
/// kept; and no new upload past the number a user may have in progress. Refused before the body
/// is read when the request says its length, and as soon as the bytes pass the limit otherwise.
extension AttachmentController {
    /// The offset a request's body may take its upload to, and what it is answered past it.
    struct BodyLimit: Sendable {
        var bytes: Int64
        var refusal: FerryHTTPError
    }

    /// The `Upload-Length` a request announces, if any.
    static func announcedLength(_ request: Request) throws -> Int64? {
        guard let text = request.headers[uploadLength] else { return nil }
        guard let length = Int64(text), length >= 0 else {
            throw ProtocolViolation.badRequest("Upload-Length \(text.prefix(20)) is not a byte count")
        }
        return length
    }

    /// Refuses a request that would pass the number of uploads in progress, the announced length
    /// or the quota, and notes the upload as it stands (so every process counts it); returns the
    /// limit of its body.
    func admit(_ open: OpenUpload, isNew: Bool, request: Request, at offset: Int64, caller: Caller) async throws -> BodyLimit {
        var limit = BodyLimit(bytes: maxAttachmentBytes, refusal: FerryHTTPError(.attachmentTooLarge, Self.tooLargeMessage(maxAttachmentBytes)))
        if let length = open.length {
            guard offset <= length else {
                throw ProtocolViolation.badRequest("Upload-Offset \(offset) is past the \(length) bytes this upload announced (Upload-Length)")
            }
            if let body = request.headers[.contentLength].flatMap(Int64.init), body > length - offset {
                throw ProtocolViolation.badRequest(
                    "Content-Length \(body) from offset \(offset) goes past the \(length) bytes this upload announced (Upload-Length)"
                )
            }
            if length < limit.bytes {
                limit = BodyLimit(
                    bytes: length,
                    refusal: FerryHTTPError(
                        .badRequest,
                        "the body goes past the \(length) bytes this upload announced (Upload-Length); nothing was kept"
                    )
                )
            }
        }
        let use = try await storage.attachmentUse(of: caller.userID, excluding: open.upload)
        if isNew, use.unfinished >= maxOpenUploads { throw tooMany(use) }
        if let quota {
            let room = quota - use.total + (try await keptAlready(open.digest, by: caller))
            let bodyLength = request.headers[.contentLength].flatMap(Int64.init) ?? 0
            guard max(open.length ?? 0, offset + bodyLength) <= room else { throw Self.overQuota(quota, use: use) }
            if room < limit.bytes { limit = BodyLimit(bytes: room, refusal: Self.overQuota(quota, use: use)) }
        }
        // What the upload holds as its row says, or as this request says if more: a client's
        // offset never lowers what the quota counts (a PATCH at 0 of an upload of 900 KiB).
        var noted = open
        noted.held = max(open.held, offset)
        guard try await storage.noteOpenUpload(noted, within: isNew ? maxOpenUploads : nil) else { throw tooMany(use) }
        return limit
    }

    /// Refuses an attachment of `size` bytes that would take the caller past the quota, their
    /// uploads in progress but this one included (one they uploaded already counts once).
    func checkQuota(adding size: Int64, of digest: AttachmentDigest, excluding upload: UploadID, by caller: Caller) async throws {
        guard let quota else { return }
        let use = try await storage.attachmentUse(of: caller.userID, excluding: upload)
        guard use.total - (try await keptAlready(digest, by: caller)) > quota - size else { return }
        throw Self.overQuota(quota, use: use)
    }

    /// The bytes of `digest` the quota counts for the caller already (they uploaded it): an upload of it again replaces them.
    private func keptAlready(_ digest: AttachmentDigest, by caller: Caller) async throws -> Int64 {
        guard try await storage.readableAttachments([digest], by: caller).contains(digest) else { return 0 }
        return try await blobs.size(of: digest) ?? 0
    }

    private func tooMany(_ use: AttachmentUse) -> FerryHTTPError {
        FerryHTTPError(
            .quotaExceeded,
            "you have \(max(use.unfinished, maxOpenUploads)) uploads in progress, the most this server keeps for one user: complete or cancel one "
                + "(DELETE /v1/attachments/DIGEST/upload); unfinished ones are discarded a day after their last byte"
        )
    }

    static func overQuota(_ quota: Int64, use: AttachmentUse) -> FerryHTTPError {
        FerryHTTPError(
            .quotaExceeded,
            "this upload would take you past the quota of \(quota) bytes: you use \(use.total) (\(use.kept) in attachments kept, "
                + "\(use.unfinishedBytes) in \(use.unfinished) uploads in progress); nothing was kept"
        )
    }
}
