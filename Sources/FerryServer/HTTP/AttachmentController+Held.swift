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
        let stored = try await candidates.concurrentMap(atOnce: Self.storeLooksAtOnce) { [blobs] in try await blobs.size(of: $0) != nil }
        return try JSONResponse.make(HeldAttachments(held: zip(candidates, stored).filter(\.1).map(\.0)))
    }

    /// The store's answers `held` waits for at once.
    static let storeLooksAtOnce = 16
}
