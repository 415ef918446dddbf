import FerryProtocol
import Foundation

/// The attachment downloads under way in one client, by digest: every ask for an attachment (a
/// screen's ``FerryClient/attachment(_:)``, a second screen's, the eager fetch after a pull)
/// shares the one download in flight, so no file is downloaded twice at once (issue 50).
actor SharedDownloads {
    private var underWay: [AttachmentDigest: Task<URL, any Error>] = [:]

    /// The file of `digest`: that of the download under way, or of one `start` begins.
    func file(of digest: AttachmentDigest, start: @escaping @Sendable () async throws -> URL) async throws -> URL {
        if let shared = underWay[digest] { return try await shared.value }
        let download = Task { try await start() }
        underWay[digest] = download
        // The ask that started it forgets it, unless a cancel (or a newer download) replaced it meanwhile.
        defer { if underWay[digest] == download { underWay[digest] = nil } }
        return try await download.value
    }

    /// Cancels the download of `digest` under way, if one is; a later ask starts a new one.
    func cancel(_ digest: AttachmentDigest) {
        underWay.removeValue(forKey: digest)?.cancel()
    }
}
