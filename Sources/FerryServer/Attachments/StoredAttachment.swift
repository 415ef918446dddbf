import FerryProtocol

/// An attachment as the server knows it (issue 50): who uploaded it, which records reference it,
/// and whether its bytes are in the store. What a test or an operator checks the server's side of
/// photos against (`FerryTestServer.storedAttachments()`).
public struct StoredAttachment: Sendable, Hashable {
    /// A record that references the attachment.
    public struct Reference: Sendable, Hashable {
        /// The space of the record; `nil` for a user's own record.
        public var space: String?
        /// The user whose own record it is; `nil` for a space's.
        public var user: String?
        /// The record's entity (`jobs`).
        public var entity: String
        /// The record's id.
        public var entityID: String
        /// Whether the record has let go of the attachment (replaced or deleted it): its readers
        /// may still download it until the janitor's sweep a day later.
        public var released: Bool

        /// A reference from `entity/entityID`, of `space` or of `user`.
        public init(space: String?, user: String?, entity: String, entityID: String, released: Bool) {
            (self.space, self.user, self.entity, self.entityID, self.released) = (space, user, entity, entityID, released)
        }
    }

    /// The attachment's name: the SHA-256 of its bytes.
    public var digest: AttachmentDigest
    /// The users whose upload of it the server keeps (what they may read and their quota counts), sorted.
    public var uploadedBy: [String]
    /// Its size, as the uploads said; `nil` when nobody's upload is kept.
    public var size: Int64?
    /// The media type an upload said; `nil` when none did.
    public var contentType: String?
    /// The records that reference it, by space or user, entity and id.
    public var references: [Reference]
    /// The bytes the attachment store holds under the digest; `nil` when it holds none (set by
    /// `FerryTestServer.storedAttachments()`, which asks the store).
    public var bytesStored: Int64?

    /// An attachment of `digest` as the database knows it.
    public init(
        digest: AttachmentDigest,
        uploadedBy: [String] = [],
        size: Int64? = nil,
        contentType: String? = nil,
        references: [Reference] = [],
        bytesStored: Int64? = nil
    ) {
        (self.digest, self.uploadedBy, self.size, self.contentType, self.references, self.bytesStored) =
            (digest, uploadedBy, size, contentType, references, bytesStored)
    }

    /// The attachments that `uploads` (digest, user, size, media type) and `references` name, by
    /// digest: what each engine's two reads of its tables become.
    static func list(
        uploads: [(digest: String, user: String, size: Int64, contentType: String?)],
        references: [(digest: String, reference: Reference)]
    ) -> [StoredAttachment] {
        var listed: [AttachmentDigest: StoredAttachment] = [:]
        for upload in uploads {
            guard let digest = AttachmentDigest(upload.digest) else { continue }
            listed[digest, default: StoredAttachment(digest: digest)].uploadedBy.append(upload.user)
            listed[digest]!.size = upload.size
            if let type = upload.contentType { listed[digest]!.contentType = type }
        }
        for (digest, reference) in references {
            guard let digest = AttachmentDigest(digest) else { continue }
            listed[digest, default: StoredAttachment(digest: digest)].references.append(reference)
        }
        return listed.values.map {
            var attachment = $0
            attachment.uploadedBy.sort()
            return attachment
        }
        .sorted { $0.digest.hex < $1.digest.hex }
    }
}
