/// How a run's attachments move (``SyncStatus/attachments``), pushed with every chunk so a
/// progress bar never freezes.
public struct AttachmentProgress: Sendable, Equatable {
    /// Attachments still waiting to upload in this run.
    public var uploadsWaiting = 0
    /// Their bytes.
    public var uploadBytes: Int64 = 0
    /// Bytes the server acknowledged in this run.
    public var bytesUploaded: Int64 = 0
    /// Attachments still waiting to download in this run.
    public var downloadsWaiting = 0
    /// Bytes downloaded in this run.
    public var bytesDownloaded: Int64 = 0

    /// Nothing moving.
    public init(uploadsWaiting: Int = 0, uploadBytes: Int64 = 0) {
        self.uploadsWaiting = uploadsWaiting
        self.uploadBytes = uploadBytes
    }
}
