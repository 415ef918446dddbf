import FerryProtocol
import Foundation
import GRDB

/// Brings attachments' bytes from the server into the store's folder (PROTOCOL.md,
/// "Attachments"): one `Range` of at most a chunk at a time, streamed into a `.part` file of this
/// download's own as the bytes arrive (a cut keeps every byte that came, and a relaunch after a
/// crash claims it), hashed whole, synced to disk, and only then named as the attachment: a partial file is
/// never served as whole.
struct AttachmentDownloader: Sendable {
    let store: FerryStore
    let connection: SyncConnection
    let journal: Journal
    let status: StatusCenter
    /// The most bytes one request asks for, so memory holds about this much.
    let chunkBytes: Int
    /// The downloads under way in this client, which every ask shares.
    let shared: SharedDownloads

    private var folder: AttachmentFolder { store.attachmentFolder }

    /// The attachment's file, downloaded first when the store does not hold it, by the download
    /// under way if there is one.
    func file(of digest: AttachmentDigest) async throws -> URL {
        try await shared.file(of: digest) { try await fetch(digest) }
    }

    private func fetch(_ digest: AttachmentDigest) async throws -> URL {
        let file = folder.file(digest)
        if folder.holds(digest) {
            // Named whole, but its row never written (a crash or a cancel just after): written now,
            // so the budget counts it and the sweep keeps it.
            let size = folder.size(of: file)
            try await store.database.write { db in
                if try !AttachmentTable.touch(digest, db: db) { try AttachmentTable.downloaded(digest, size: size, contentType: nil, db: db) }
            }
            return file
        }
        let (size, contentType) = try await download(digest)
        try await store.database.write { db in try AttachmentTable.downloaded(digest, size: size, contentType: contentType, db: db) }
        await journal.record(
            JournalEvent(
                kind: .attachmentDownloaded,
                message: "attachment \(digest) downloaded (\(size) bytes)",
                details: [.digest: digest.description, .bytes: "\(size)"]
            )
        )
        return file
    }

    /// Fetches the attachments of eager tables' rows the store has never held; returns how many.
    /// Each failure is journaled and waits for the next run: the records are in the store already.
    func fetchEager() async -> Int {
        guard let digests = try? await store.database.read({ db in try Self.eagerMissing(store.tables, db: db) }), !digests.isEmpty else {
            return 0
        }
        var fetched = 0
        await status.update { $0.attachments.downloadsWaiting = digests.count }
        for digest in digests where !Task.isCancelled {
            do {
                _ = try await file(of: digest)
                fetched += 1
            } catch FerryError.Code.updateRequired {
                break  // said once, by the answer that required it; nothing more is asked
            } catch {
                await journal.record(
                    JournalEvent(
                        kind: .attachmentFailed,
                        message: "the download of \(digest) failed: \(error)",
                        details: [.digest: digest.description]
                    )
                )
            }
            await status.update { $0.attachments.downloadsWaiting -= 1 }
        }
        await status.update { $0.attachments.downloadsWaiting = 0 }  // cancelled midway: none waits in this run
        return fetched
    }

    /// Downloads the attachment into a `.part` file from where one stands, checks its digest, and
    /// names it whole; returns its size and the media type the server answered.
    private func download(_ digest: AttachmentDigest) async throws -> (size: Int64, contentType: String?) {
        let transfer = AttachmentTransfer(digest: digest.description, direction: .download)
        await status.update { $0.attachments.record(transfer) }
        do {
            let whole = try await receiveWhole(digest)
            await status.update { $0.attachments.end(transfer.id) }
            return whole
        } catch {
            await status.update { $0.attachments.end(transfer.id) }
            throw error
        }
    }

    /// ``download(_:)``'s requests, until the `.part` file holds the whole attachment.
    private func receiveWhole(_ digest: AttachmentDigest) async throws -> (size: Int64, contentType: String?) {
        let path = Endpoint.attachments + "/" + digest.description
        let (partial, lock) = try folder.claimPartial(digest)
        defer { try? lock.close() }
        var failures = 0
        var renewedToken = false
        var total: Int64?
        var contentType: String?
        while true {
            try Task.checkCancellation()
            let have = folder.size(of: partial)
            if let total, have >= total { break }
            do {
                let answer = try await receive(digest, path: path, into: partial, from: have)
                (total, contentType) = (answer.size, answer.contentType ?? contentType)
                failures = 0
            } catch let gone as Gone {
                // The user may not read it (a space left, a record deleted): they keep none of the bytes.
                try? FileManager.default.removeItem(at: partial)
                throw gone.error
            } catch is Unauthorized where !renewedToken {
                // Revoked or expired early: a new token gets one try at once, as `send` gives it.
                renewedToken = true
            } catch let refused as Unauthorized {
                throw FerryError.unauthorized(refused.message)
            } catch let error as FerryError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                failures += 1
                let answer = error as? Retryable
                try await connection.pause(
                    afterFailedAttempt: failures,
                    status: answer?.status,
                    retryAfter: answer?.retryAfter,
                    reason: "the download of \(digest) was cut: \(error)"
                )
            }
        }
        let file = partial
        let found = try await offCooperativeThreads("ferry.attachment.hash") { try AttachmentFolder.digest(of: file, synchronizing: true) }
        guard found.digest == digest else {
            try? FileManager.default.removeItem(at: partial)
            throw FerryError.attachment(
                "the bytes downloaded for \(digest) hash to \(found.digest); they were dropped, and the next try starts again"
            )
        }
        try folder.place(partial, as: digest)
        return (found.size, contentType)
    }

    /// One request of a download: at most a chunk from `have` on, appended as it arrives. Returns
    /// the attachment's size, and its media type when the server says one.
    private func receive(
        _ digest: AttachmentDigest,
        path: String,
        into partial: URL,
        from have: Int64
    ) async throws -> (size: Int64, contentType: String?) {
        let request = TransportRequest(method: "GET", path: path, headers: ["Range": "bytes=\(have)-\(have + Int64(chunkBytes) - 1)"])
        let stream = try await connection.openStream(request, orSend: true)
        switch stream.status {
        case 206, 200:
            // A 200 is the whole attachment: the bytes so far go.
            if stream.status == 200 { try folder.truncate(partial) }
            let size =
                stream.status == 200
                ? stream.headers["content-length"].flatMap { Int64($0) }
                : stream.headers["content-range"]?.split(separator: "/").last.flatMap { Int64($0) }
            let start = stream.status == 200 ? 0 : have
            var meter = TransferMeter(AttachmentTransfer(digest: digest.description, direction: .download, bytesDone: start, totalBytes: size))
            let first = meter.transfer
            await status.update { $0.attachments.record(first) }
            for try await chunk in stream.body {
                try folder.append(chunk, to: partial)
                guard let (moved, now) = meter.add(Int64(chunk.count)) else { continue }
                await status.update {
                    $0.attachments.bytesDownloaded += moved
                    $0.attachments.record(now)
                }
            }
            let untold = meter.untold()
            if untold > 0 { await status.update { $0.attachments.bytesDownloaded += untold } }
            let type = stream.headers["content-type"].flatMap { $0 == "application/octet-stream" ? nil : $0 }
            return (size ?? folder.size(of: partial), type)
        case 416:
            // Nothing at `have`: the file holds the whole attachment (a crash before it was named), or
            // the attachment is empty, or the part is longer than it (not its bytes): the size says.
            let size = stream.headers["content-range"]?.split(separator: "/").last.flatMap { Int64($0) } ?? 0
            if have > size { try folder.truncate(partial) }
            return (size, nil)
        default:
            let body = try? await stream.collect()
            let envelope = body.flatMap { try? JSONDecoder().decode(ErrorEnvelope.self, from: $0).error }
            let message = envelope?.message ?? "HTTP \(stream.status)"
            // The server's code (`not_found`, …) travels in `serverCode`, for a screen to match.
            let code = envelope?.code ?? "http_\(stream.status)"
            switch stream.status {
            case 404:
                throw Gone(
                    error: FerryError(.attachment, "the server holds no attachment \(digest) this user may read: \(message)", serverCode: code)
                )
            case 401: throw Unauthorized(message: message)  // marked refused (`openStream`): the next try asks for a new one
            case 429, 500...:
                throw Retryable(message: message, status: stream.status, retryAfter: TransportResponse.integer(stream.headers["retry-after"]))
            default: throw FerryError(.attachment, "the download of \(digest) was refused (\(stream.status)): \(message)", serverCode: code)
            }
        }
    }

    /// The server holds nothing this user may read under the digest (`404`).
    private struct Gone: Error {
        var error: FerryError
    }

    /// The server refused the token (`401`).
    private struct Unauthorized: Error {
        var message: String
    }

    /// A download answered with a status worth trying again (5xx, 429).
    private struct Retryable: Error, CustomStringConvertible {
        var message: String
        var status: Int
        /// What the answer's `Retry-After` asked, in seconds.
        var retryAfter: Int?
        var description: String { message }
    }

    /// The digests eager tables' rows reference that the store has never held (one evicted for
    /// the cache budget comes back when asked for, not with every run).
    static func eagerMissing(_ tables: [SyncedTable], db: Database) throws -> [AttachmentDigest] {
        var digests: Set<String> = []
        for table in tables where table.attachmentDownloads == .eager {
            digests.formUnion(try table.heldDigests(unknownToStore: true, db: db))
        }
        return digests.compactMap(AttachmentDigest.init).sorted { $0.hex < $1.hex }
    }
}
