import FerryProtocol
import Foundation
import Hummingbird
import NIOCore

/// Which of many attachments the caller holds (PROTOCOL.md, "Attachments").
extension AttachmentController {
    /// `POST /v1/attachments`: which of the body's digests (``HeldAttachmentsRequest``) the caller
    /// may read now, each as `HEAD` answers it: one request for a client's many photos, where a
    /// `HEAD` each cost a round trip each. The store is asked for a few at once (on S3, a `HEAD`
    /// each: a thousand in turn would outlast a client's timeout).
    func held(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let caller = try Self.caller(context)
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: 128 * 1024)
        } catch {
            throw ProtocolViolation.badRequest(
                "body must be a JSON object {\"digests\": […]} of at most 128 KiB (\(ProtocolLimits.maxDigestsPerLookup) digests)"
            )
        }
        let asked = try HeldAttachmentsRequest.decode(from: Data(body.readableBytesView)).digests
        let readable = try await storage.readableAttachments(asked, by: caller)
        var seen = Set<AttachmentDigest>()
        let candidates = asked.filter { readable.contains($0) && seen.insert($0).inserted }
        var stored = Set<AttachmentDigest>()
        try await withThrowingTaskGroup(of: AttachmentDigest?.self) { group in
            for (index, digest) in candidates.enumerated() {
                if index >= Self.storeLooksAtOnce, let found = try await group.next() { found.map { _ = stored.insert($0) } }
                group.addTask { [blobs] in try await blobs.size(of: digest) != nil ? digest : nil }
            }
            for try await found in group { found.map { _ = stored.insert($0) } }
        }
        return try JSONResponse.make(HeldAttachments(held: candidates.filter(stored.contains)))
    }

    /// The store's answers `held` waits for at once.
    static let storeLooksAtOnce = 16
}
