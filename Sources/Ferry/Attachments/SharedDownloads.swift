import FerryProtocol
import Foundation

/// The attachment downloads under way in one client, by digest: every ask for an attachment (a
/// screen's ``FerryClient/attachment(_:)``, a second screen's, the eager fetch after a pull)
/// shares the one download in flight, so no file is downloaded twice at once (issue 50).
///
/// Each ask waits as itself: a cancelled ask (a screen closed, a sync stopped) stops waiting at
/// once, and the download stops when nobody waits for it any more, so `stop()` never waits for a
/// photo nobody wants.
actor SharedDownloads {
    private struct Download {
        let id = UUID()
        var task: Task<Void, Never>?
        var waiters: [UUID: CheckedContinuation<URL, any Error>] = [:]
    }

    private var underWay: [AttachmentDigest: Download] = [:]

    /// The file of `digest`: that of the download under way, or of one `start` begins.
    func file(of digest: AttachmentDigest, start: @escaping @Sendable () async throws -> URL) async throws -> URL {
        let waiter = UUID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                join(digest, as: waiter, continuation, start: start)
            }
        } onCancel: {
            Task { await self.leave(digest, waiter) }
        }
    }

    /// Cancels the download of `digest` under way, if one is: every ask waiting for it throws
    /// `CancellationError`, and a later ask starts a new one.
    func cancel(_ digest: AttachmentDigest) {
        guard let download = underWay.removeValue(forKey: digest) else { return }
        download.task?.cancel()
        for waiter in download.waiters.values { waiter.resume(throwing: CancellationError()) }
    }

    /// Cancels every download under way (the client stops).
    func cancelAll() {
        for digest in Array(underWay.keys) { cancel(digest) }
    }

    private func join(
        _ digest: AttachmentDigest,
        as waiter: UUID,
        _ continuation: CheckedContinuation<URL, any Error>,
        start: @escaping @Sendable () async throws -> URL
    ) {
        // Cancelled before it joined: its `leave` already ran and found nothing.
        guard !Task.isCancelled else { return continuation.resume(throwing: CancellationError()) }
        if underWay[digest] == nil {
            var download = Download()
            let id = download.id
            download.task = Task {
                let result: Result<URL, any Error>
                do { result = .success(try await start()) } catch { result = .failure(error) }
                self.finish(digest, id, result)
            }
            underWay[digest] = download
        }
        underWay[digest]?.waiters[waiter] = continuation
    }

    /// The download `id` of `digest` ended: its waiters get its outcome, and the next ask starts anew.
    private func finish(_ digest: AttachmentDigest, _ id: UUID, _ result: Result<URL, any Error>) {
        guard underWay[digest]?.id == id, let download = underWay.removeValue(forKey: digest) else { return }
        for waiter in download.waiters.values { waiter.resume(with: result) }
    }

    /// An ask was cancelled: it stops waiting, and the download stops when it was the last.
    private func leave(_ digest: AttachmentDigest, _ waiter: UUID) {
        guard let continuation = underWay[digest]?.waiters.removeValue(forKey: waiter) else { return }
        continuation.resume(throwing: CancellationError())
        if underWay[digest]?.waiters.isEmpty == true { underWay.removeValue(forKey: digest)?.task?.cancel() }
    }
}
