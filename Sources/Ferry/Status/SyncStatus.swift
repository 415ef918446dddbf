import FerryProtocol
import Foundation

/// What the engine is doing, in one value that observers receive on every change.
public struct SyncStatus: Sendable, Equatable {
    /// What the engine is doing right now.
    public enum Phase: Sendable, Equatable {
        /// Nothing running: up to date, or changes waiting for the next run (`pending`).
        case idle
        /// Uploading: `done` of `total` pending changes acknowledged so far.
        case uploading(done: Int, total: Int)
        /// Pulling: `received` changes applied so far in this run.
        case downloading(received: Int)
        /// Waiting before the next request, and why (rate limit, server unavailable, backoff).
        case waiting(seconds: Double, reason: String)
        /// The last run failed, and why; the next trigger tries again. Match its `code`
        /// (`FerryError.Code.unauthorized`: ask for a new token); show its `description`.
        case failed(FerryError)
        /// Nobody is signed in to the session: there is nothing to sync.
        case signedOut
    }

    /// What the engine is doing; `idle` between runs.
    public var phase: Phase = .idle
    /// Outbox entries the server has not acknowledged yet (queued or in flight).
    public var pending = 0
    /// Outbox entries set aside as dead letters, waiting for the app to retry or discard them.
    public var deadLettered = 0
    /// When the last successful run ended, kept in the store across launches; `nil` if none has.
    public var lastSyncedAt: Date?
    /// Why the last run failed; `nil` once a run succeeds.
    public var lastError: FerryError?
    /// The spaces the user is a member of, with their roles, as the latest pull read them
    /// (PROTOCOL.md, "Spaces"); a revoked space leaves this list, and its queued changes count in `deadLettered`.
    public var spaces: [Membership] = []
    /// Attachments waiting to upload (idle and offline too) and to download in this run, with
    /// their bytes, the bytes moved in this run, and each transfer under way.
    public var attachments = AttachmentProgress()
    /// Set when the server required a newer version of the app (`426 update_required`): show
    /// its message and ask the user to update. Nothing is sent meanwhile; the store and its
    /// queue stay as they are, and go once the updated app syncs.
    public var updateRequired: UpdateRequired?

    /// The status before anything is known: `phase` (idle by default), nothing pending, never synced.
    public init(phase: Phase = .idle) {
        self.phase = phase
    }

    /// For a progress bar: "Synced 2,500 of 5,000 (50%)" while uploading; idle, what waits,
    /// files included: "4 changes and 3 files (60 MB) waiting".
    public var progressText: String {
        let files = attachments.uploadsWaiting
        let filesText = "\(files.formatted()) \(files == 1 ? "file" : "files") (\(Self.size(attachments.uploadBytes)))"
        if let updateRequired, phase != .signedOut { return "Update required: \(updateRequired.message)" }
        return switch phase {
        case .idle where pending > 0 && files > 0: "\(pending.formatted()) \(pending == 1 ? "change" : "changes") and \(filesText) waiting"
        case .idle where files > 0: "\(filesText) waiting"
        case .idle where pending > 0: "\(pending.formatted()) \(pending == 1 ? "change" : "changes") waiting"
        case .idle: lastSyncedAt == nil ? "Not synced yet" : "Up to date"
        case .uploading(let done, let total):
            "Synced \(done.formatted()) of \(total.formatted()) (\(total <= 0 ? 100 : Int(min(100, max(0, Double(done) * 100 / Double(total)))))%)"
        case .downloading(let received): "Received \(received.formatted()) changes"
        case .waiting(let seconds, let reason): "Waiting \(Self.wait(seconds)): \(reason)"
        case .failed(let error): "Sync failed: \(error)"
        case .signedOut: "Signed out"
        }
    }

    /// Whether observers should hear of this status after `previous`: it differs, or its failure
    /// says something new (a `FerryError` is equal to another of its code, whatever its message).
    func isNews(after previous: SyncStatus) -> Bool {
        self != previous || lastError?.description != previous.lastError?.description
    }

    /// "60 MB", "512 KB", "12 bytes": decimal units, as a person reads a file's size.
    static func size(_ bytes: Int64) -> String {
        switch bytes {
        case ..<1000: "\(bytes) bytes"
        case ..<999_500: "\(Int((Double(bytes) / 1e3).rounded())) KB"
        case ..<999_500_000: "\(Int((Double(bytes) / 1e6).rounded())) MB"
        default: "\(String(format: "%.1f", Double(bytes) / 1e9)) GB"
        }
    }

    /// "12 s"; a wait no clock reaches (infinite, NaN, centuries) reads "a long time", never traps.
    private static func wait(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds < 1e9 else { return "a long time" }
        return "\(Int(max(0, seconds).rounded(.up)).formatted()) s"
    }
}

extension Int {
    func formatted() -> String {
        let digits = String(magnitude)
        var groups: [Substring] = []
        var end = digits.endIndex
        while end > digits.startIndex {
            let start = digits.index(end, offsetBy: -3, limitedBy: digits.startIndex) ?? digits.startIndex
            groups.insert(digits[start..<end], at: 0)
            end = start
        }
        return (self < 0 ? "-" : "") + groups.joined(separator: ",")
    }
}
