import Foundation

/// `POST /v1/attachments`: which of `digests` the server holds for the caller, asked at once for
/// many (a client about to upload photos asks once, not once a photo).
public struct HeldAttachmentsRequest: Sendable, Codable, Hashable {
    /// The digests asked about: 1 to ``ProtocolLimits/maxDigestsPerLookup`` (one asked twice is answered once).
    public var digests: [AttachmentDigest]

    /// A question about `digests`.
    public init(digests: [AttachmentDigest]) {
        self.digests = digests
    }

    /// Decodes `{"digests": […]}`; anything else is a `bad_request` saying what was wrong.
    public static func decode(from body: Data) throws(ProtocolViolation) -> HeldAttachmentsRequest {
        // Foundation's parser: other fields are ignored whatever they hold.
        guard let fields = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any], let texts = fields["digests"] as? [Any] else {
            throw .badRequest("body must be a JSON object {\"digests\": [\"sha256:…\", …]}")
        }
        guard (1...ProtocolLimits.maxDigestsPerLookup).contains(texts.count) else {
            throw .badRequest("digests must hold 1 to \(ProtocolLimits.maxDigestsPerLookup) digests, got \(texts.count)")
        }
        var digests: [AttachmentDigest] = []
        for (index, text) in texts.enumerated() {
            guard let text = text as? String, let digest = AttachmentDigest(text) else {
                throw .badRequest("digests[\(index)]: " + AttachmentDigest.problem(with: "\(text)"))
            }
            digests.append(digest)
        }
        return HeldAttachmentsRequest(digests: digests)
    }
}

/// The answer to ``HeldAttachmentsRequest``: the digests asked about that the caller may read
/// now, as `HEAD /v1/attachments/{digest}` would answer each `200`, in the order asked.
public struct HeldAttachments: Sendable, Codable, Hashable {
    /// The digests held for the caller.
    public var held: [AttachmentDigest]

    /// An answer naming `held`.
    public init(held: [AttachmentDigest]) {
        self.held = held
    }
}
