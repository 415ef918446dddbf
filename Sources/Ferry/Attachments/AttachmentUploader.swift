import FerryProtocol
import Foundation
import GRDB

/// Sends attachments' bytes to the server (PROTOCOL.md, "Attachments"), a chunk per request, so
/// memory holds one chunk and never a whole file. It asks first which of the waiting attachments
/// the server holds for this user already (one `POST /v1/attachments` for up to 1,000; a `HEAD`
/// each on a server that cannot say), then sends each of the others from the offset the server
/// holds (the resumable-upload draft, interop version 6); a try after a failure asks that offset
/// again, so a cut connection costs only the bytes it lost, and a relaunch goes on from there. A
/// file that fits one request is sent whole at once, without asking its offset: it would be sent
/// from its first byte all the same.
struct AttachmentUploader: Sendable {
    let store: FerryStore
    let connection: SyncConnection
    let journal: Journal
    let status: StatusCenter
    /// The bytes of one request's body.
    let chunkBytes: Int

    private var folder: AttachmentFolder { store.attachmentFolder }

    /// The attachment bytes uploaded before the changes they held back are pushed: a large photo's
    /// record goes right after it, small photos' records a push for a few, not a push each.
    static let bytesBetweenPushes: Int64 = 8 * 1024 * 1024

    /// A refusal that no retry changes (the server keeps no attachments, or takes none this
    /// large): the changes referencing the attachment become dead letters saying why.
    private struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    /// Uploads the attachments waiting for it that a queued change references (its newest
    /// state), oldest first, calling `pushReleased` once ``bytesBetweenPushes`` of them are on the
    /// server since the last call, and after the last (the changes they held back go then, not
    /// behind the others); returns how many reached the server. A refusal the
    /// next run may not meet again (a lost connection, a full quota) is noted with its error and
    /// the attachment waits; one that no run changes, a file gone, or a file whose bytes changed,
    /// makes the changes referencing it dead letters naming their records.
    func uploadWaiting(pushReleased: () async throws -> Void = {}) async throws -> Int {
        do {
            return try await uploadEach(pushReleased: pushReleased)
        } catch {
            // The run ends here: no upload is under way any more.
            await status.update { $0.attachments.transfers.removeAll { $0.direction == .upload } }
            throw error
        }
    }

    private func uploadEach(pushReleased: () async throws -> Void) async throws -> Int {
        let waiting = try await store.database.read { db in
            try AttachmentTable.waiting(db).filter { try OutboxTable.newestStateReferences($0.digest.description, db: db) }
        }
        guard !waiting.isEmpty else { return 0 }
        await status.update {
            $0.attachments.uploadsWaiting = waiting.count
            $0.attachments.uploadBytes = waiting.reduce(0) { $0 + $1.size }
            $0.attachments.bytesUploaded = 0
        }
        let held = try await held(waiting.map(\.digest))
        var uploaded = 0
        var unpushed: Int64 = 0
        do {
            for row in waiting {
                try Task.checkCancellation()
                guard try await upload(row, held: held.map { $0.contains(row.digest) }) else { continue }
                uploaded += 1
                unpushed += max(row.size, 1)
                // Outside the row's own failures: a push that fails is not this photo's.
                if unpushed >= Self.bytesBetweenPushes {
                    unpushed = 0
                    try await pushReleased()
                }
            }
        } catch {
            // The photos already on the server send their records now, not at the next run (an
            // upload that stalled leaves the server reachable), unless the run was cancelled, must
            // stop, or sends nothing more.
            if unpushed > 0, !(error is CancellationError),
                !((error as? FerryError).map { [.updateRequired, .leaseLost, .stopped].contains($0.code) } ?? false)
            {
                try? await pushReleased()
            }
            throw error
        }
        if unpushed > 0 { try await pushReleased() }
        return uploaded
    }

    /// Uploads one attachment (`held`: whether the server holds it already, `nil` to ask), with its
    /// transfer in the status; returns whether it reached the server. A refusal no retry changes
    /// sets the changes referencing it aside; a failure that may pass is noted, and ends the run
    /// unless it was the attachment's own.
    private func upload(_ row: AttachmentTable.Row, held: Bool?) async throws -> Bool {
        let transfer = AttachmentTransfer(digest: row.digest.description, direction: .upload, totalBytes: row.size)
        var meter = TransferMeter(transfer)
        await status.update { $0.attachments.record(transfer) }
        var reached = false
        do {
            guard folder.holds(row.digest) else { throw Refused(description: "its file is gone from the store's folder") }
            try await sendBytes(
                row,
                held: held,
                resumed: { held in
                    // Bytes an earlier run sent: done, but not moved in this run.
                    meter = TransferMeter(AttachmentTransfer(digest: transfer.digest, direction: .upload, bytesDone: held, totalBytes: row.size))
                    let now = meter.transfer
                    await status.update { $0.attachments.record(now) }
                },
                sent: { bytes in
                    guard let (moved, now) = meter.add(bytes) else { return }
                    await status.update {
                        $0.attachments.bytesUploaded += moved
                        $0.attachments.record(now)
                    }
                }
            )
            try await store.database.write { db in try AttachmentTable.uploaded(row.digest, db: db) }
            reached = true
            await journal.record(
                JournalEvent(
                    kind: .attachmentUploaded,
                    message: "attachment \(row.digest) is on the server (\(row.size) bytes)",
                    details: [.digest: row.digest.description, .bytes: "\(row.size)"]
                )
            )
        } catch let refused as Refused {
            try await setAside(row.digest, because: refused.description)
        } catch let error as FerryError where error.code == .updateRequired {
            throw error  // said once, by the answer that required it: not the upload's failure
        } catch  where !(error is CancellationError) {
            // Noted for the queue snapshot; a lost connection ends this run, a refusal waits for the next.
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
        await status.update {
            $0.attachments.uploadsWaiting = max(0, $0.attachments.uploadsWaiting - 1)
            $0.attachments.uploadBytes = max(0, $0.attachments.uploadBytes - row.size)
            $0.attachments.end(transfer.id)
        }
        return reached
    }

    /// Sends the attachment's bytes from where the server's upload of them stands; `held` says
    /// whether the server holds them already (`nil`: ask it).
    private func sendBytes(
        _ row: AttachmentTable.Row,
        held: Bool?,
        resumed: (Int64) async -> Void,
        sent: (Int64) async -> Void
    ) async throws {
        let path = Endpoint.attachments + "/" + row.digest.description
        // Another device of the user's may have uploaded the same bytes: nothing to send.
        let onServer: Bool
        if let held { onServer = held } else { onServer = try await isOnServer(path) }
        if onServer { return }
        // A file that fits one request goes whole from its first byte, whatever an earlier try left.
        var offset = row.size <= Int64(chunkBytes) ? nil : try await heldOffset(path)
        var acknowledged = offset ?? 0
        if acknowledged > 0 { await resumed(acknowledged) }
        var (stalls, refusedCreations) = (0, 0)
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
                // 409: another request of this client works on the upload (a cut one the server
                // still reads), or it holds another offset: wait a little, then from there.
                if response.status == 409 {
                    try await connection.pause(afterFailedAttempt: stalls + 1, reason: "the upload of \(row.digest) is busy")
                }
                let held = answered != nil ? answered : try await heldOffset(path)
                let progressed = (held ?? 0) > acknowledged
                if progressed { await sent((held ?? 0) - acknowledged) }
                (offset, acknowledged) = (held, max(acknowledged, held ?? 0))
                stalls = progressed ? 0 : stalls + 1
            case 404:
                // Completed (its answer lost): done. Discarded after a day untouched: again from the
                // first byte. A creation refused twice in a row: a server that keeps no attachments.
                if try await isOnServer(path) {
                    await sent(row.size - acknowledged)
                    return
                }
                if let held = try await heldOffset(path) {
                    (offset, stalls) = (held, stalls + 1)
                } else {
                    refusedCreations += 1
                    if refusedCreations >= 2 { throw Refused(description: "the server refused it: \(SyncConnection.message(in: response))") }
                    (offset, stalls) = (nil, stalls + 1)
                }
            case 413:
                throw Refused(description: "the server takes no attachment this large: \(SyncConnection.message(in: response))")
            case 422:
                // The bytes hash to something else: the file changed on disk since it was attached.
                if try await offCooperativeThreads("ferry.attachment.hash", { [folder] in try AttachmentFolder.digest(of: folder.file(row.digest)) })
                    .digest != row.digest
                {
                    throw Refused(description: "its file changed on disk after it was attached")
                }
                throw FerryError.attachment("the server refused the upload of \(row.digest) (422): \(SyncConnection.message(in: response))")
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

    /// Which of `digests` the server holds for this user (`POST /v1/attachments`, up to 1,000 a
    /// request); `nil` from a server that cannot say (one from before the lookup).
    private func held(_ digests: [AttachmentDigest]) async throws -> Set<AttachmentDigest>? {
        var held = Set<AttachmentDigest>()
        for start in stride(from: 0, to: digests.count, by: ProtocolLimits.maxDigestsPerLookup) {
            let asked = HeldAttachmentsRequest(digests: Array(digests[start..<min(start + ProtocolLimits.maxDigestsPerLookup, digests.count)]))
            let response = try await connection.send(
                TransportRequest(method: "POST", path: Endpoint.attachments, body: try JSONEncoder().encode(asked))
            )
            guard response.status == 200, let answer = try? JSONDecoder().decode(HeldAttachments.self, from: response.body) else { return nil }
            held.formUnion(answer.held)
        }
        return held
    }

    private func isOnServer(_ path: String) async throws -> Bool {
        try await connection.send(TransportRequest(method: "HEAD", path: path)).status == 200
    }

    /// The request that sends the attachment's next chunk: the upload's creation from its first
    /// byte (`offset` nil), else an append at `offset` (at the end, an empty one that completes it).
    private func request(_ row: AttachmentTable.Row, path: String, from offset: Int64?) throws -> TransportRequest {
        let start = offset ?? 0
        let chunk = try folder.read(row.digest, at: start, count: chunkBytes)
        var headers = ["Upload-Draft-Interop-Version": "6", "Upload-Complete": start + Int64(chunk.count) >= row.size ? "?1" : "?0"]
        guard let offset else {
            headers["Upload-Length"] = "\(row.size)"
            headers["Content-Type"] = row.contentType ?? "application/octet-stream"  // the server keeps it, and answers it
            return TransportRequest(method: "POST", path: path, headers: headers, body: chunk)
        }
        headers["Upload-Offset"] = "\(offset)"
        headers["Content-Type"] = "application/partial-upload"
        return TransportRequest(method: "PATCH", path: path + "/upload", headers: headers, body: chunk)
    }

    /// The bytes the server holds of this client's upload of the attachment at `path` (all of
    /// them when it completed); `nil`: none.
    private func heldOffset(_ path: String) async throws -> Int64? {
        let head = try await connection.send(
            TransportRequest(method: "HEAD", path: path + "/upload", headers: ["Upload-Draft-Interop-Version": "6"])
        )
        return head.status == 204 ? head.integerHeader("Upload-Offset").map(Int64.init) : nil
    }

    /// An attachment that can never be uploaded: the changes referencing it become dead letters
    /// naming their records and why, and the store forgets it.
    private func setAside(_ digest: AttachmentDigest, because why: String) async throws {
        let count = try await store.database.write { db in
            try AttachmentTable.forget([digest], db: db)
            return try OutboxTable.deadLetterReferencing(
                digest.description,
                reason: {
                    "\($0.entity) \($0.entityID) references attachment \(digest), which cannot be uploaded: \(why); "
                        + "attach the file again (FerryStore.attach(fileAt:)) and write its digest"
                },
                db: db
            )
        }
        await journal.record(
            JournalEvent(
                kind: .attachmentFailed,
                message: "attachment \(digest) cannot be uploaded (\(why)): \(count) changes set aside",
                details: [.digest: digest.description, .deadLettered: "\(count)"]
            )
        )
    }
}
