import FerryProtocol

/// An upload in progress as the database knows it (issue 50): whose it is, of which digest, the
/// length its first request announced (kept for the upload's life, whichever process a later
/// request reaches), and the bytes it holds. Unfinished uploads count toward their user's quota
/// and are capped in number, so nobody fills the disk with uploads never completed.
public struct OpenUpload: Sendable, Equatable {
    /// The upload's id: one per user, digest and client.
    public var upload: UploadID
    /// The uploader.
    public var userID: String
    /// The digest the bytes are to hash to.
    public var digest: AttachmentDigest
    /// `Upload-Length`, once announced: no request may take the upload past it or end it short.
    public var length: Int64?
    /// The bytes the upload holds, as of its last request.
    public var held: Int64
    /// The attachment's media type, as its first request's `Content-Type` said (`image/jpeg`).
    public var contentType: String?

    /// An upload of `digest` by `userID`.
    public init(upload: UploadID, userID: String, digest: AttachmentDigest, length: Int64?, held: Int64, contentType: String? = nil) {
        (self.upload, self.userID, self.digest, self.length, self.held, self.contentType) = (upload, userID, digest, length, held, contentType)
    }
}

/// What a user's attachments take on the server, for the quota (`--attachment-quota`).
public struct AttachmentUse: Sendable, Equatable {
    /// The bytes of the attachments they uploaded that the server keeps.
    public var kept: Int64
    /// How many uploads they have in progress.
    public var unfinished: Int
    /// The bytes those uploads count: each its held or announced bytes, whichever is more.
    public var unfinishedBytes: Int64

    /// A use of `kept` bytes and `unfinished` uploads counting `unfinishedBytes`.
    public init(kept: Int64, unfinished: Int, unfinishedBytes: Int64) {
        (self.kept, self.unfinished, self.unfinishedBytes) = (kept, unfinished, unfinishedBytes)
    }

    /// Everything the quota counts.
    public var total: Int64 { kept + unfinishedBytes }
}
