import FerryProtocol
import Foundation
import GRDB

/// Moves attachments' bytes between the store's folder and the server (PROTOCOL.md,
/// "Attachments"), a chunk per request, so memory holds one chunk and never a whole file:
///
/// - an upload asks whether the server holds the bytes for this user already (`HEAD`), then
///   sends them from the offset the server holds (the resumable-upload draft, interop version
///   6): a cut connection costs the chunk in flight at most, and a relaunch goes on from there;
/// - a download asks for one `Range` at a time into `<digest>.part`, hashes the whole file, and
///   only then names it as the attachment: a partial file is never served as whole.
struct AttachmentTransfers: Sendable {
    let store: FerryStore
    let connection: SyncConnection
    let journal: Journal
    let status: StatusCenter
    /// The bytes of one request's body or answer.
    let chunkBytes: Int

    private var folder: AttachmentFolder { store.attachmentFolder }

    // MARK: Uploading

    /// Uploads every attachment waiting for it, oldest first; returns how many reached the
    /// server. One the server refuses is noted with its error and tried again on the next run;
    /// one whose file is gone makes the changes referencing it dead letters naming their records.
    func uploadWaiting() async throws -> Int {
        let waiting = try await store.database.read(AttachmentTable.waiting)
        guard !waiting.isEmpty else { return 0 }
        var progress = AttachmentProgress(uploadsWaiting: waiting.count, uploadBytes: waiting.reduce(0) { $0 + $1.size })
        await status.update { $0.attachments = progress }
        var uploaded = 0
        for row in waiting {
            try Task.checkCancellation()
            guard folder.holds(row.digest) else {
                try await fileGone(row.digest)
                continue
            }
            do {
                try await upload(row) { bytes in
                    progress.bytesUploaded += bytes
                    await status.update { $0.attachments = progress }
                }
                try await store.database.write { db in try AttachmentTable.uploaded(row.digest, db: db) }
                uploaded += 1
                await journal.record(
                    JournalEvent(
                        kind: .attachmentUploaded,
                        message: "attachment \(row.digest) is on the server (\(row.size) bytes)",
                        details: [.digest: row.digest.description, .bytes: "\(row.size)"]
                    )
                )
            } catch  where !(error is CancellationError) {
                // Noted for the queue snapshot; refused bytes wait for the next run, a lost connection ends this one.
                try await store.database.write { db in try AttachmentTable.failed(row.digest, error: "\(error)", db: db) }
                await journal.record(
                    JournalEvent(
                        kind: .attachmentFailed,
                        message: "the upload of \(row.digest) failed: \(error)",
                        details: [.digest: row.digest.description]
                    )
                )
                guard let error = error as? FerryError, error.code == .attachment else { throw error }
            }
            progress.uploadsWaiting -= 1
            progress.uploadBytes -= row.size
            await status.update { $0.attachments = progress }
        }
        return uploaded
    }

    /// Sends the attachment's bytes from where the server's upload of them stands; a try after a
    /// failure asks the server that offset again, so a cut connection costs only the bytes it lost.
    private func upload(_ row: AttachmentTable.Row, sent: (Int64) async -> Void) async throws {
        let path = Endpoint.attachments + "/" + row.digest.description
        // Another device of the user's may have uploaded the same bytes: nothing to send.
        if try await connection.send(TransportRequest(method: "HEAD", path: path)).status == 200 { return }
        var offset = try await heldOffset(path)
        var acknowledged = offset ?? 0
        var stalls = 0
        while true {
            let response = try await connection.send(try request(row, path: path, from: offset)) {
                try self.request(row, path: path, from: try await self.heldOffset(path))
            }
            let answered = response.integerHeader("Upload-Offset").map(Int64.init)
            switch response.status {
            case 201:
                await sent(row.size - acknowledged)
                return
            case 200, 204, 409:
                // 409: the server holds another offset (an append cut before its answer): from there.
                let held = answered != nil ? answered : try await heldOffset(path)
                guard let reached = held else {
                    offset = nil
                    stalls += 1
                    break
                }
                stalls = reached > acknowledged ? 0 : stalls + 1
                if reached > acknowledged { await sent(reached - acknowledged) }
                (offset, acknowledged) = (reached, reached)
            case 404:
                // Completed by another device of the user's at the same time, or discarded (a day
                // untouched): done, or again from the first byte.
                if try await connection.send(TransportRequest(method: "HEAD", path: path)).status == 200 {
                    await sent(row.size - acknowledged)
                    return
                }
                offset = nil
                stalls += 1
            default:
                throw FerryError.attachment(
                    "the server refused the upload of \(row.digest) (\(response.status)): \(SyncConnection.message(in: response))"
                )
            }
            if stalls >= 5 {
                throw FerryError.unreachable("the upload of \(row.digest) made no progress in 5 requests; it goes on at the next run")
            }
        }
    }

    /// The request that sends the attachment's next chunk: the upload's creation from its first
    /// byte (`offset` nil), else an append at `offset`.
    private func request(_ row: AttachmentTable.Row, path: String, from offset: Int64?) throws -> TransportRequest {
        let start = offset ?? 0
        let chunk = try folder.read(row.digest, at: start, count: chunkBytes)
        var headers = ["Upload-Draft-Interop-Version": "6", "Upload-Complete": start + Int64(chunk.count) >= row.size ? "?1" : "?0"]
        guard let offset else {
            headers["Upload-Length"] = "\(row.size)"
            headers["Content-Type"] = "application/octet-stream"
            return TransportRequest(method: "POST", path: path, headers: headers, body: chunk)
        }
        headers["Upload-Offset"] = "\(offset)"
        headers["Content-Type"] = "application/partial-upload"
        return TransportRequest(method: "PATCH", path: path + "/upload", headers: headers, body: chunk)
    }

    /// The bytes the server holds of this user's upload of the attachment at `path`; `nil`: none.
    private func heldOffset(_ path: String) async throws -> Int64? {
        let head = try await connection.send(
            TransportRequest(method: "HEAD", path: path + "/upload", headers: ["Upload-Draft-Interop-Version": "6"])
        )
        return head.status == 204 ? head.integerHeader("Upload-Offset").map(Int64.init) : nil
    }

    /// The file of an attachment waiting for upload is gone (deleted outside Ferry): the changes
    /// referencing it can never be sent, and become dead letters naming their records.
    private func fileGone(_ digest: AttachmentDigest) async throws {
        let count = try await store.database.write { db in
            try AttachmentTable.forget([digest], db: db)
            return try OutboxTable.deadLetterReferencing(
                digest.description,
                reason: {
                    "\($0.entity) \($0.entityID) references attachment \(digest), whose file is gone from the store's folder; "
                        + "attach the file again (FerryStore.attach(fileAt:)) and write its digest"
                },
                db: db
            )
        }
        await journal.record(
            JournalEvent(
                kind: .attachmentFailed,
                message: "attachment \(digest) waited for upload and its file is gone: \(count) changes set aside",
                details: [.digest: digest.description, .deadLettered: "\(count)"]
            )
        )
    }

    // MARK: Downloading

    /// The attachment's file, downloaded first when the store does not hold it.
    func file(of digest: AttachmentDigest) async throws -> URL {
        let file = folder.file(digest)
        if folder.holds(digest) {
            try await store.database.write { db in try AttachmentTable.touch(digest, db: db) }
            return file
        }
        let size = try await download(digest)
        try await store.database.write { db in try AttachmentTable.downloaded(digest, size: size, db: db) }
        await journal.record(
            JournalEvent(
                kind: .attachmentDownloaded,
                message: "attachment \(digest) downloaded (\(size) bytes)",
                details: [.digest: digest.description, .bytes: "\(size)"]
            )
        )
        return file
    }

    /// Fetches the attachments of eager tables' rows the store holds no file of; returns how many.
    /// One the server does not serve (its record not readable yet) waits for the next run.
    func fetchEager() async throws -> Int {
        let digests = try await store.database.read { db in try Self.eagerMissing(store.tables, db: db) }
        var fetched = 0
        for digest in digests {
            try Task.checkCancellation()
            do {
                _ = try await file(of: digest)
                fetched += 1
            } catch let error as FerryError where error.code == .attachment {
                await journal.record(JournalEvent(kind: .attachmentFailed, message: "\(error)", details: [.digest: digest.description]))
            }
        }
        return fetched
    }

    /// Downloads the attachment into its `.part` file from where it stands, streamed as it
    /// arrives (a cut keeps every byte that came), checks its digest, and names it whole;
    /// returns its size.
    private func download(_ digest: AttachmentDigest) async throws -> Int64 {
        let path = Endpoint.attachments + "/" + digest.description
        var failures = 0
        while true {
            try Task.checkCancellation()
            let have = folder.partialSize(digest)
            do {
                if try await receive(digest, path: path, from: have) { break }
            } catch let error as FerryError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                failures += 1
                try await connection.pause(afterFailedAttempt: failures, reason: "the download of \(digest) was cut: \(error)")
            }
        }
        let partial = folder.partial(digest)
        let found = try await offCooperativeThreads("ferry.attachment.hash") { try AttachmentFolder.digest(of: partial) }
        guard found.digest == digest else {
            try? FileManager.default.removeItem(at: partial)
            throw FerryError.attachment(
                "the bytes downloaded for \(digest) hash to \(found.digest); they were dropped, and the next try starts again"
            )
        }
        try folder.place(partial, as: digest)
        return found.size
    }

    /// One request of a download: the bytes from `have` on, appended as they arrive. Returns
    /// whether the `.part` file now holds the whole attachment.
    private func receive(_ digest: AttachmentDigest, path: String, from have: Int64) async throws -> Bool {
        let request = TransportRequest(method: "GET", path: path, headers: ["Range": "bytes=\(have)-"])
        let stream = try await connection.openStream(request)
        switch stream.status {
        case 206, 200:
            // A 200 is the whole attachment: the bytes so far go.
            if stream.status == 200 { try? FileManager.default.removeItem(at: folder.partial(digest)) }
            let total = stream.status == 200 ? nil : stream.headers["content-range"]?.split(separator: "/").last.flatMap { Int64($0) }
            var size = stream.status == 200 ? 0 : have
            for try await chunk in stream.body {
                size = try folder.append(chunk, toPartial: digest)
                await status.update { $0.attachments.bytesDownloaded += Int64(chunk.count) }
            }
            return total.map { size >= $0 } ?? true
        case 416 where have > 0:
            try? FileManager.default.removeItem(at: folder.partial(digest))  // more than the attachment holds: start again
            return false
        case 404:
            throw FerryError.attachment(
                "the server holds no attachment \(digest) this user may read: a record referencing it may not have reached the server yet"
            )
        default:
            let body = try? await stream.collect()
            let message = body.flatMap { try? JSONDecoder().decode(ErrorEnvelope.self, from: $0).error.message } ?? "HTTP \(stream.status)"
            if stream.status >= 500 || stream.status == 429 { throw StreamRefused(message: message) }
            throw FerryError.attachment("the download of \(digest) was refused (\(stream.status)): \(message)")
        }
    }

    /// A download answered with a status worth trying again (5xx, 429).
    private struct StreamRefused: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// The digests eager tables' rows reference that the store holds no file of.
    static func eagerMissing(_ tables: [SyncedTable], db: Database) throws -> [AttachmentDigest] {
        var digests: [AttachmentDigest] = []
        for table in tables where table.attachmentDownloads == .eager {
            for column in table.attachments {
                let value = table.attachmentSQL(column)
                // Text only: a pulled record may hold anything there.
                digests += try String.fetchAll(
                    db,
                    sql: """
                        SELECT DISTINCT \(value) FROM \(table.table.quotedDatabaseIdentifier) WHERE typeof(\(value)) = 'text'
                            AND \(value) NOT IN (SELECT digest FROM ferry_attachments WHERE stored = 1)
                        """
                )
                .compactMap(AttachmentDigest.init)
            }
        }
        return Array(Set(digests)).sorted { $0.hex < $1.hex }
    }
}
