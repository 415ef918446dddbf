/// How attachments move (``SyncStatus/attachments``): what waits to upload, offline and idle
/// included, and each transfer under way with its bytes done of its total. A transfer's bytes are
/// published when they moved by 1% of it or 256 KiB, whichever is more, and at its end: about a
/// hundred updates for a large file, so a progress bar moves without flooding a screen.
public struct AttachmentProgress: Sendable, Equatable {
    /// Attachments waiting to upload: attached, and not yet on the server. Kept while idle and
    /// offline too, for a badge.
    public var uploadsWaiting = 0
    /// Their bytes.
    public var uploadBytes: Int64 = 0
    /// Bytes the server acknowledged in this run.
    public var bytesUploaded: Int64 = 0
    /// Attachments still waiting to download in this run.
    public var downloadsWaiting = 0
    /// Bytes downloaded in this run.
    public var bytesDownloaded: Int64 = 0
    /// The transfers under way now, each with its own bytes: several downloads opened at once each
    /// show their own fraction.
    public var transfers: [AttachmentTransfer] = []

    /// Nothing moving.
    public init(uploadsWaiting: Int = 0, uploadBytes: Int64 = 0) {
        self.uploadsWaiting = uploadsWaiting
        self.uploadBytes = uploadBytes
    }

    /// Sets `transfer`'s bytes, adding it if new.
    mutating func record(_ transfer: AttachmentTransfer) {
        if let index = transfers.firstIndex(where: { $0.id == transfer.id }) {
            transfers[index] = transfer
        } else {
            transfers.append(transfer)
        }
    }

    /// Ends the transfer `id`.
    mutating func end(_ id: String) {
        transfers.removeAll { $0.id == id }
    }
}

/// One attachment moving between the store and the server.
public struct AttachmentTransfer: Sendable, Equatable, Identifiable {
    /// Which way the bytes go.
    public enum Direction: String, Sendable {
        /// From this store to the server.
        case upload
        /// From the server to this store.
        case download
    }

    /// The attachment's digest, as a column holds it.
    public var digest: String
    /// Which way its bytes go.
    public var direction: Direction
    /// The bytes moved so far (acknowledged by the server, for an upload).
    public var bytesDone: Int64
    /// The attachment's size; `nil` for a download until the server's first answer says it.
    public var totalBytes: Int64?

    /// `upload:` or `download:` and the digest: one transfer each way per attachment.
    public var id: String { "\(direction.rawValue):\(digest)" }

    /// From 0 to 1; `nil` while the total is unknown. An empty attachment is done at once.
    public var fractionDone: Double? {
        guard let totalBytes else { return nil }
        return totalBytes <= 0 ? 1 : min(1, Double(bytesDone) / Double(totalBytes))
    }

    /// A transfer of `digest` with `bytesDone` of `totalBytes`.
    public init(digest: String, direction: Direction, bytesDone: Int64 = 0, totalBytes: Int64? = nil) {
        (self.digest, self.direction, self.bytesDone, self.totalBytes) = (digest, direction, bytesDone, totalBytes)
    }
}

/// A transfer's bytes as they move, told to observers a step at a time: when they moved by 1% of
/// the transfer or 256 KiB since the last telling, whichever is more, or by anything once a
/// quarter of a second went by without a telling (a slow link still moves the bar a few times a
/// second), and at its end. A 50 MB photo is about 100 updates, not 3,000 (one per 16 KiB the
/// network delivers).
struct TransferMeter {
    private(set) var transfer: AttachmentTransfer
    /// The bytes done as observers last heard them, and when.
    private var told: Int64
    private var toldAt: ContinuousClock.Instant
    /// The longest a moving transfer goes untold.
    static let patience: Duration = .milliseconds(250)

    /// A meter of `transfer`, whose bytes done so far observers hear of with it at `now`.
    init(_ transfer: AttachmentTransfer, now: ContinuousClock.Instant = .now) {
        (self.transfer, told, toldAt) = (transfer, transfer.bytesDone, now)
    }

    /// Counts `bytes` more, arrived at `now`. When worth telling: the bytes moved since the last
    /// telling, and the transfer as it now stands.
    mutating func add(_ bytes: Int64, now: ContinuousClock.Instant = .now) -> (moved: Int64, transfer: AttachmentTransfer)? {
        transfer.bytesDone += bytes
        let done = transfer.bytesDone
        let finished = transfer.totalBytes.map { done >= $0 } ?? false
        let step = done - told >= max(256 * 1024, (transfer.totalBytes ?? 0) / 100)
        let overdue = done > told && now - toldAt >= Self.patience
        guard finished || step || overdue else { return nil }
        defer { (told, toldAt) = (done, now) }
        return (done - told, transfer)
    }

    /// The bytes moved that observers have not heard of yet (at a request's end), now told.
    mutating func untold(now: ContinuousClock.Instant = .now) -> Int64 {
        defer { (told, toldAt) = (transfer.bytesDone, now) }
        return transfer.bytesDone - told
    }
}
