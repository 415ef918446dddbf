import Crypto
import FerryProtocol
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// The attachment endpoints (PROTOCOL.md, "Attachments"): `HEAD` and `GET` of an attachment
/// by digest, `Range` answered `206`, and uploads that resume, in the IETF draft "Resumable
/// Uploads for HTTP" (interop versions 3, 5 and 6: `Upload-Complete`, or `Upload-Incomplete`
/// for 3; `Upload-Offset`; `HEAD` for the offset; `PATCH` to append). Bytes stream between the
/// connection and the `BlobStore`, never whole in memory.
///
/// A user's upload of a digest has one resource, `/v1/attachments/{digest}/upload`, which the
/// client can name without the `104` informational answer (which this server does not send):
/// a cut upload is resumed by asking that resource its offset.
struct AttachmentController: Sendable {
    let storage: any SyncStorage
    let blobs: any BlobStore
    /// The largest attachment taken, in bytes.
    let maxAttachmentBytes: Int64
    /// The most bytes one user's uploads may hold, finished or not; `nil`: no limit.
    var quota: Int64? = nil
    /// The most uploads in progress one user may have at once (`--max-open-uploads`).
    var maxOpenUploads = ServerConfiguration.defaultMaxOpenUploads
    /// How long a body may take beyond a second per `minimumBodyRate` (`ServerConfiguration/bodyTimeout`).
    var bodyTimeout: Duration = .seconds(30)
    /// The attachments this process read whole and found true (their ends are not hashed again).
    let verified = VerifiedDigests()
    var metrics = ServerMetrics()

    static let uploadComplete = HTTPField.Name("Upload-Complete")!
    static let uploadIncomplete = HTTPField.Name("Upload-Incomplete")!
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let interopVersion = HTTPField.Name("Upload-Draft-Interop-Version")!
    static let noSniff = HTTPField.Name("X-Content-Type-Options")!

    // MARK: Reading

    func head(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, size) = try await readable(context)
        var response = Response(status: .ok)
        response.headers[.contentLength] = "\(size)"
        response.headers[.acceptRanges] = "bytes"
        response.headers[.contentType] = try await storage.contentType(of: digest) ?? "application/octet-stream"
        return response
    }

    func get(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, size) = try await readable(context)
        let range = try Self.range(request.headers[.range], size: size)
        var headers: HTTPFields = [
            .eTag: "\"\(digest)\"", .cacheControl: "private, immutable", .acceptRanges: "bytes",
            .contentType: try await storage.contentType(of: digest) ?? "application/octet-stream", Self.noSniff: "nosniff",
        ]
        headers[.contentLength] = "\(range.count)"
        var status = HTTPResponse.Status.ok
        if range.count != size {
            status = .partialContent
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)"
        }
        let (blobs, metrics, logger, verified) = (self.blobs, self.metrics, context.logger, self.verified)
        // Its length known, so the bytes count in the rate limit's charge per MiB.
        let body = ResponseBody(contentLength: Int(range.count)) { writer in
            // A whole read is hashed as it passes, its last chunk held back until the hash is
            // known: bytes that are not the digest's (a store's fault) are taken aside, and the
            // answer is cut short of its length, so no client takes it for whole. A read of the
            // end of an attachment this process has not checked yet (a download a chunk at a
            // time) hashes the whole attachment first, once.
            var hash = range.count == size ? SHA256() : nil
            var last: ByteBuffer?
            if !range.isEmpty {
                try await blobs.read(digest, range: range) { buffer in
                    metrics.recordAttachmentBytes(buffer.readableBytes, direction: "sent")
                    hash?.update(data: buffer.readableBytesView)
                    if let last { try await writer.write(last) }
                    last = buffer
                }
            }
            if hash == nil, range.upperBound == size, !verified.contains(digest) {
                hash = SHA256()
                try await blobs.read(digest, range: 0..<size) { hash?.update(data: $0.readableBytesView) }
            }
            if let actual = hash.map({ AttachmentDigest(sha256: $0.finalize()) }) {
                guard actual == digest else {
                    try await Self.quarantine(digest, holding: actual, blobs: blobs, metrics: metrics, logger: logger)
                }
                verified.insert(digest)
            }
            if let last { try await writer.write(last) }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// Takes aside the attachment whose bytes, read whole, hashed to `actual`, and fails the answer.
    static func quarantine(
        _ digest: AttachmentDigest,
        holding actual: AttachmentDigest,
        blobs: any BlobStore,
        metrics: ServerMetrics,
        logger: Logger
    ) async throws -> Never {
        let metadata: Logger.Metadata = ["digest": "\(digest)", "actual": "\(actual)"]
        do {
            if try await blobs.quarantine(digest) {
                metrics.recordQuarantinedAttachment()
                logger.error(
                    "an attachment's stored bytes did not hash to its digest; they were taken aside, and the next upload of the true bytes writes it anew",
                    metadata: metadata
                )
            }
        } catch {
            logger.error(
                "an attachment's stored bytes did not hash to its digest, and taking them aside failed",
                metadata: metadata.merging(["error": "\(error)"]) { $1 }
            )
        }
        throw FerryHTTPError(.unavailable, "the attachment's stored bytes were not \(digest); they were taken aside")
    }

    /// The bytes a `Range` header asks for (one range, RFC 9110), the whole attachment without one.
    static func range(_ header: String?, size: Int64) throws -> Range<Int64> {
        guard let header else { return 0..<size }
        var refused = FerryHTTPError(
            .rangeNotSatisfiable,
            "Range '\(header.prefix(80))' is not one range of the attachment's \(size) bytes (bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX)"
        )
        refused.headers[.contentRange] = "bytes */\(size)"
        guard header.hasPrefix("bytes="), !header.contains(",") else { throw refused }
        let parts = header.dropFirst(6).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2 else { throw refused }
        switch (Int64(parts[0]), Int64(parts[1])) {
        case (let first?, let last?) where first >= 0 && first <= last && first < size:
            return first..<(last >= size - 1 ? size : last + 1)  // never last + 1 past 2^63 (review)
        case (let first?, nil) where parts[1].isEmpty && first >= 0 && first < size:
            return first..<size
        case (nil, let suffix?) where parts[0].isEmpty && suffix > 0:
            return max(0, size - suffix)..<size
        default:
            throw refused
        }
    }

    /// The digest in the path and its size, when the caller may read it; `404` otherwise,
    /// whether or not another user holds the same bytes.
    private func readable(_ context: FerryRequestContext) async throws -> (AttachmentDigest, Int64) {
        let digest = try Self.digest(context)
        guard try await storage.readableAttachments([digest], by: try Self.caller(context)).contains(digest),
            let size = try await blobs.size(of: digest)
        else {
            throw FerryHTTPError(.notFound, "no attachment \(digest) this user may read: upload it, or sync the record that references it")
        }
        return (digest, size)
    }

    // MARK: Uploading

    /// `POST /v1/attachments/{digest}`: an upload from its first byte, whole (`Upload-Complete: ?1`,
    /// or no draft headers at all) or the first part of one (`?0`).
    func create(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, caller) = (try Self.digest(context), try Self.caller(context))
        let version = try Self.version(of: request)
        let announced = try Self.announcedLength(request)
        try checkLength(of: request, at: 0)
        let upload = Self.upload(of: digest, by: caller, from: request)
        let complete = try Self.isComplete(request, version: version)
        // A creation starts again from nothing (its row too), but never under a request still appending.
        do {
            try await discard(upload)
        } catch is UploadBusy {
            throw Self.busy(offset: try? await blobs.offset(of: upload))
        }
        let open = OpenUpload(
            upload: upload,
            userID: caller.userID,
            digest: digest,
            length: announced,
            held: 0,
            contentType: try Self.mediaType(of: request)
        )
        let limit = try await admit(open, isNew: true, request: request, at: 0, caller: caller)
        return try await append(
            request,
            to: open,
            at: 0,
            limit: limit,
            creating: true,
            complete: complete,
            caller: caller,
            version: version,
            context: context
        )
    }

    /// `HEAD /v1/attachments/{digest}/upload`: how many bytes the server holds of the caller's upload.
    func offset(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, caller) = (try Self.digest(context), try Self.caller(context))
        let version = try Self.version(of: request) ?? 6
        let upload = Self.upload(of: digest, by: caller, from: request)
        guard let offset = try await blobs.offset(of: upload) else {
            // No bytes: a row left by a process stopped before its first byte counts no more.
            try await storage.closeUpload(upload)
            // Done (its answer may have been lost): the whole size, so a client resuming sends nothing more.
            if try await storage.readableAttachments([digest], by: caller).contains(digest), let size = try await blobs.size(of: digest) {
                return Self.progress(.noContent, offset: size, complete: true, version: version)
            }
            throw Self.noUpload(of: digest)
        }
        var response = Self.progress(.noContent, offset: offset, complete: false, version: version)
        if let length = try await storage.openUpload(upload)?.length { response.headers[Self.uploadLength] = "\(length)" }
        return response
    }

    /// `PATCH /v1/attachments/{digest}/upload`: appends at `Upload-Offset`, and completes the
    /// upload with `Upload-Complete: ?1` (`Upload-Incomplete: ?0`). The `Upload-Length` an
    /// earlier request announced holds: a request may repeat it, never change it.
    func resume(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, caller) = (try Self.digest(context), try Self.caller(context))
        let version = try Self.version(of: request) ?? 6
        guard let text = request.headers[Self.uploadOffset], let offset = Int64(text), offset >= 0 else {
            throw ProtocolViolation.badRequest("PATCH of an upload needs Upload-Offset: the offset a HEAD of the upload answered")
        }
        let upload = Self.upload(of: digest, by: caller, from: request)
        let noted = try await storage.openUpload(upload)
        var open = noted ?? OpenUpload(upload: upload, userID: caller.userID, digest: digest, length: nil, held: offset)
        if let announced = try Self.announcedLength(request) {
            if let kept = open.length, kept != announced {
                throw ProtocolViolation.badRequest(
                    "Upload-Length \(announced) is not the \(kept) this upload announced; an upload's length never changes"
                )
            }
            open.length = announced
        }
        do {
            try checkLength(of: request, at: offset)
        } catch let error as FerryHTTPError where error.code == .attachmentTooLarge {
            try? await discard(upload)  // as its message says: nothing is kept
            throw error
        }
        let complete = try Self.isComplete(request, version: version)
        let limit = try await admit(open, isNew: noted == nil, request: request, at: offset, caller: caller)
        // An upload begins with POST: a PATCH appends to one that exists.
        return try await append(
            request,
            to: open,
            at: offset,
            limit: limit,
            creating: false,
            complete: complete,
            caller: caller,
            version: version,
            context: context
        )
    }

    /// `DELETE /v1/attachments/{digest}/upload`: the upload is abandoned and its bytes go.
    func cancel(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (digest, caller) = (try Self.digest(context), try Self.caller(context))
        let upload = Self.upload(of: digest, by: caller, from: request)
        do {
            try await discard(upload)
        } catch is UploadBusy {
            throw Self.busy(offset: try? await blobs.offset(of: upload))
        }
        return Response(status: .noContent)
    }

    /// Discards an upload's bytes, and forgets it in the quota.
    private func discard(_ upload: UploadID) async throws {
        try await blobs.discard(upload)
        try await storage.closeUpload(upload)
    }

    private func append(
        _ request: Request,
        to open: OpenUpload,
        at offset: Int64,
        limit: BodyLimit,
        creating: Bool,
        complete: Bool,
        caller: Caller,
        version: Int?,
        context: FerryRequestContext
    ) async throws -> Response {
        let (upload, digest) = (open.upload, open.digest)
        let reached = try await receive(request, into: open, at: offset, limit: limit, creating: creating, context: context)
        var held = open
        held.held = reached
        guard complete else {
            try await storage.noteOpenUpload(held)
            return Self.progress(.noContent, offset: reached, complete: false, version: version ?? 6)
        }
        if let announced = open.length, announced != reached {
            try? await discard(upload)
            throw ProtocolViolation.badRequest("the upload ended at \(reached) bytes, not the \(announced) Upload-Length announced; nothing was kept")
        }
        do {
            try await checkQuota(adding: reached, of: digest, excluding: upload, by: caller)
        } catch {
            try? await discard(upload)
            throw error
        }
        let size: Int64
        do {
            size = try await blobs.complete(upload, as: digest)
        } catch is UploadBusy {
            throw Self.busy(offset: try? await blobs.offset(of: upload))
        } catch is UploadNotFound {
            throw Self.busy(offset: nil)  // completed or discarded by another request meanwhile
        } catch let mismatch as DigestMismatch {
            try? await storage.closeUpload(upload)
            throw FerryHTTPError(
                .digestMismatch,
                "the \(reached) bytes uploaded hash to \(mismatch.actual), not \(digest); nothing was kept: upload the bytes again"
            )
        }
        try await storage.noteUpload(of: digest, size: size, contentType: open.contentType, by: caller.userID)
        try await storage.closeUpload(upload)
        // Purged at this very moment (`AttachmentJanitor`): the client tries again, and uploads it anew.
        guard try await blobs.size(of: digest) != nil else {
            var error = FerryHTTPError(.unavailable, "the attachment was being purged as its upload completed; upload it again")
            error.headers[.retryAfter] = "1"
            throw error
        }
        var response = Self.progress(.created, offset: size, complete: true, version: version ?? 6)
        response.headers[.location] = "\(Endpoint.attachments)/\(digest)"
        return response
    }

    /// Notes that the upload holds at least `bytes` (never less than its row says: a client's
    /// offset does not lower what the quota counts).
    private func noteHeld(_ open: OpenUpload, atLeast bytes: Int64) async throws {
        var noted = open
        noted.held = max(open.held, bytes)
        try await storage.noteOpenUpload(noted)
    }

    /// The slowest an upload's body may arrive, on average past its first `bodyTimeout`: a body
    /// trickled slower holds one of its user's request slots for nothing.
    static let minimumBodyRate: Int64 = 16 * 1024

    /// How long a request's body may take: `bodyTimeout`, and a second per `minimumBodyRate` of
    /// its length (`Content-Length`, or what it may send up to its limit), counting at most 64
    /// MiB: a longer body is cut there, and the upload goes on from what arrived.
    func bodyDeadline(_ request: Request, at offset: Int64, limit: BodyLimit) -> Duration {
        let length = min(request.headers[.contentLength].flatMap(Int64.init) ?? .max, limit.bytes - offset, 64 << 20)
        return bodyTimeout + .seconds(max(0, length) / Self.minimumBodyRate)
    }

    /// Appends the request's body to the upload within `limit` and its deadline; returns where
    /// the upload ends. Past the deadline the connection's input is closed, as a push's: the
    /// append ends with what arrived, which the store keeps (never cancelled midway, which would
    /// lose it), and the server reads no more of a trickle.
    private func receive(
        _ request: Request,
        into open: OpenUpload,
        at offset: Int64,
        limit: BodyLimit,
        creating: Bool,
        context: FerryRequestContext
    ) async throws -> Int64 {
        let (upload, digest) = (open.upload, open.digest)
        let bytes = LimitedBody(body: request.body, start: offset, limit: limit, metrics: metrics, facts: context.facts)
        let timedOut = NIOLockedValueBox(false)
        let (deadline, channel) = (bodyDeadline(request, at: offset, limit: limit), context.channel)
        let timer = Task {
            try await Task.sleep(for: deadline)
            timedOut.withLockedValue { $0 = true }
            channel?.close(mode: .input, promise: nil)
        }
        defer { timer.cancel() }
        let outcome: Result<Int64, any Error>
        do {
            outcome = .success(try await blobs.append(bytes, to: upload, at: offset, creating: creating))
        } catch {
            outcome = .failure(error)
        }
        timer.cancel()
        let announced = request.headers[.contentLength].flatMap(Int64.init)
        if timedOut.withLockedValue({ $0 }), announced.map({ offset + $0 > ((try? outcome.get()) ?? offset) }) ?? true {
            try? await noteHeld(open, atLeast: offset + Int64(context.facts.bodyBytes))
            var error = FerryHTTPError(
                .requestTimeout,
                "the body did not arrive in time (at least \(Self.minimumBodyRate / 1024) KiB/s after \(Int(bodyTimeout.seconds)) s); "
                    + "what arrived is kept: ask the upload's offset with HEAD and go on from there"
            )
            error.headers[.connection] = "close"
            throw error
        }
        do {
            return try outcome.get()
        } catch {
            // What arrived may stay: the quota counts it until the next request says where the upload stands.
            try? await noteHeld(open, atLeast: offset + Int64(context.facts.bodyBytes))
            throw try await appendFailure(error, upload: upload, of: digest, at: offset)
        }
    }

    /// What a failed append answers.
    private func appendFailure(_ error: any Error, upload: UploadID, of digest: AttachmentDigest, at offset: Int64) async throws -> any Error {
        switch error {
        case is UploadNotFound:
            try? await storage.closeUpload(upload)
            return Self.noUpload(of: digest)
        case let mismatch as UploadOffsetMismatch:
            var refusal = FerryHTTPError(
                .uploadOffsetMismatch,
                "the upload holds \(mismatch.expected) bytes, not \(offset): append from Upload-Offset \(mismatch.expected)"
            )
            refusal.headers[Self.uploadOffset] = "\(mismatch.expected)"
            return refusal
        case is UploadBusy:
            return Self.busy(offset: try? await blobs.offset(of: upload))
        case let refusal as FerryHTTPError where [.attachmentTooLarge, .badRequest, .quotaExceeded].contains(refusal.code):
            // Past the largest attachment, its announced length or the quota: as the message says, nothing is kept.
            try? await discard(upload)
            return refusal
        default:
            return error
        }
    }

    /// A request's body that fails once the upload would pass its limit (`BodyLimit`): a body
    /// without an announced length is read up to the limit and no further. Every byte read
    /// counts toward the request's cost, kept or not (`RequestFacts/received(_:)`).
    struct LimitedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let body: RequestBody
        let start: Int64
        let limit: BodyLimit
        let metrics: ServerMetrics
        let facts: RequestFacts

        struct AsyncIterator: AsyncIteratorProtocol {
            var base: RequestBody.AsyncIterator
            var passed: Int64
            let limit: BodyLimit
            let metrics: ServerMetrics
            let facts: RequestFacts

            mutating func next() async throws -> ByteBuffer? {
                guard let buffer = try await base.next() else { return nil }
                metrics.recordAttachmentBytes(buffer.readableBytes, direction: "received")
                facts.received(buffer.readableBytes)
                passed += Int64(buffer.readableBytes)
                guard passed <= limit.bytes else { throw limit.refusal }
                return buffer
            }
        }

        func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: body.makeAsyncIterator(), passed: start, limit: limit, metrics: metrics, facts: facts)
        }
    }

    // MARK: Headers

    /// The draft's interop version the request speaks; `nil` for a plain request.
    static func version(of request: Request) throws -> Int? {
        guard let text = request.headers[interopVersion] else { return nil }
        guard let version = Int(text), [3, 5, 6].contains(version) else {
            throw ProtocolViolation.badRequest("Upload-Draft-Interop-Version \(text.prefix(20)) is not one this server speaks: 3, 5 or 6")
        }
        return version
    }

    /// The attachment's media type a creation's `Content-Type` names (`image/jpeg`, parameters
    /// dropped); `nil` for none or a generic one (`application/octet-stream`).
    static func mediaType(of request: Request) throws -> String? {
        guard let header = request.headers[.contentType] else { return nil }
        let type = MediaType.normalized(header)
        guard !["", "application/octet-stream", "application/partial-upload"].contains(type) else { return nil }
        guard MediaType.isValid(type) else {
            throw ProtocolViolation.badRequest("Content-Type '\(type.prefix(40))' is not a media type (type/subtype, like image/jpeg)")
        }
        return type
    }

    /// Whether the request's body ends the upload: `Upload-Complete` (5 and 6), `Upload-Incomplete` (3), else yes.
    static func isComplete(_ request: Request, version: Int?) throws -> Bool {
        let (name, meansComplete) = (version ?? 6) >= 5 ? (uploadComplete, true) : (uploadIncomplete, false)
        switch request.headers[name] {
        case nil: return true
        case "?1": return meansComplete
        case "?0": return !meansComplete
        case let other?: throw ProtocolViolation.badRequest("\(name) must be ?1 or ?0 (a structured boolean), not \(other.prefix(20))")
        }
    }

    /// Refuses before reading the body an upload whose offset or announced size passes the
    /// limit. (Compared without adding: an offset near 2^63 plus a length would overflow.)
    private func checkLength(of request: Request, at offset: Int64) throws {
        let tooLarge = FerryHTTPError(.attachmentTooLarge, Self.tooLargeMessage(maxAttachmentBytes))
        guard offset <= maxAttachmentBytes else { throw tooLarge }
        for name in [Self.uploadLength, .contentLength] {
            guard let text = request.headers[name] else { continue }
            guard let length = Int64(text), length >= 0 else { throw ProtocolViolation.badRequest("\(name) \(text.prefix(20)) is not a byte count") }
            if length > (name == .contentLength ? maxAttachmentBytes - offset : maxAttachmentBytes) { throw tooLarge }
        }
    }

    /// No upload of `digest` by this user and client: `404`.
    static func noUpload(of digest: AttachmentDigest) -> FerryHTTPError {
        FerryHTTPError(.notFound, "no upload of \(digest) in progress for this user: start one with POST /v1/attachments/\(digest)")
    }

    /// Another request appends to, completes or discards the upload now: `409` with the bytes it holds.
    static func busy(offset: Int64?) -> FerryHTTPError {
        var error = FerryHTTPError(.uploadOffsetMismatch, "another request is working on this upload now; ask its offset with HEAD, then go on")
        if let offset { error.headers[uploadOffset] = "\(offset)" }
        return error
    }

    static func tooLargeMessage(_ limit: Int64) -> String {
        "an attachment may hold at most \(limit) bytes on this server (--max-attachment-bytes); nothing was kept"
    }

    static func progress(_ status: HTTPResponse.Status, offset: Int64?, complete: Bool, version: Int) -> Response {
        var response = Response(status: status)
        response.headers[interopVersion] = "\(version)"
        if version >= 5 {
            response.headers[uploadComplete] = complete ? "?1" : "?0"
        } else {
            response.headers[uploadIncomplete] = complete ? "?0" : "?1"
        }
        if let offset { response.headers[uploadOffset] = "\(offset)" }
        return response
    }

    /// A client's upload of a digest: one resource, so a cut upload is found again by its digest
    /// alone. Per client (`Ferry-Client-ID`, when the request names one): two devices of a user
    /// uploading the same bytes at once each have their own, and neither discards the other's.
    static func upload(of digest: AttachmentDigest, by caller: Caller, from request: Request) -> UploadID {
        let client = request.headers[.ferryClientID].flatMap { ProtocolValidation.clientIDProblem($0) == nil ? $0 : nil } ?? ""
        let hash = SHA256.hash(data: Array("\(caller.userID)\n\(digest)\n\(client)".utf8))
        return UploadID(String(AttachmentDigest(sha256: hash).hex.prefix(32)))!
    }

    private static func digest(_ context: FerryRequestContext) throws -> AttachmentDigest {
        let text = context.parameters.get("digest") ?? ""
        guard let digest = AttachmentDigest(text.removingPercentEncoding ?? text) else {
            throw ProtocolViolation.badRequest(AttachmentDigest.problem(with: text))
        }
        return digest
    }

    static func caller(_ context: FerryRequestContext) throws -> Caller {
        guard let userID = context.userID else { throw AuthFailure.missingHeader }
        return Caller(userID: userID, isService: context.isService)
    }
}

/// Digests a process has hashed whole and found true, at most `limit` (then it starts again:
/// a check costs one more read, nothing else).
final class VerifiedDigests: Sendable {
    private let digests = NIOLockedValueBox(Set<AttachmentDigest>())
    private let limit = 100_000

    func contains(_ digest: AttachmentDigest) -> Bool { digests.withLockedValue { $0.contains(digest) } }

    func insert(_ digest: AttachmentDigest) {
        digests.withLockedValue { digests in
            if digests.count >= limit { digests.removeAll() }
            digests.insert(digest)
        }
    }

    /// Forgets `digest`: its bytes were replaced or taken aside.
    func remove(_ digest: AttachmentDigest) { _ = digests.withLockedValue { $0.remove(digest) } }
}
