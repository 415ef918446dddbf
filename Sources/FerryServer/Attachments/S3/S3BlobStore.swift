import Crypto
import FerryProtocol
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Attachments in an S3-compatible object store (`s3://BUCKET?endpoint=URL&region=R`), for
/// deployments where several server processes or hosts share one PostgreSQL database: every
/// process reads and writes the same bucket.
///
/// - A whole attachment is the object `<prefix>attachments/<hex>`, which appears only once its
///   bytes hashed to its digest (nothing is readable before). When the process completing the
///   upload wrote its every part, it hashed them as they passed, and the store copies the parts
///   into the object itself (a copy, or a multipart upload of copies: parts of 5 MiB or more);
///   else the parts are read back, hashed, and written as the object.
/// - An upload in progress is a run of objects `<prefix>uploads/<id>/<offset>-<nonce>`, one per
///   part of at most `partBytes` that reached this store, so a cut connection keeps every part
///   flushed and any process goes on from the offset their sizes add up to. A part's key is new
///   each time (the nonce), so no object is ever written twice: two processes appending at one
///   offset write two objects, never one over the other, and the bytes a completion hashed are
///   the bytes it copies (issue 50: an overwritten part made an object its digest did not name).
/// - A completion always writes the object, even when one is there: the true bytes replace a
///   wrong object (a store's fault), and bytes another user holds take the path and the time of
///   new ones, so an upload's timing never tells whether someone holds them.
/// - `GET` streams the bytes through the server (no redirect to a presigned URL): the token
///   that reads a record is the one that reads its attachments.
public struct S3BlobStore: BlobStore {
    let client: S3Client
    let prefix: String
    /// The most bytes held in memory per request: one part.
    let partBytes: Int
    /// The uploads a request of this process works on now.
    private let busy = NIOLockedValueBox(Set<UploadID>())
    /// What this process wrote of uploads (`WrittenHere`), so the completion skips reading the
    /// bytes back.
    private let written = NIOLockedValueBox([UploadID: WrittenHere]())
    /// The most uploads `written` remembers; past it, one is forgotten (it costs a `LIST` and a
    /// read back, nothing else).
    static let rememberedUploads = 4096
    /// S3's smallest part of a multipart upload, but the last: 5 MiB.
    static let smallestPart = 5 * 1024 * 1024
    /// The part copies one completion asks the store for at once.
    static let copiesAtOnce = 4
    /// The most parts remembered of one upload.
    static let rememberedParts = 2048
    /// How many completions the store joined itself, without reading the parts back (for tests).
    let joinedInStore = NIOLockedValueBox(0)

    /// A store in `bucket` at `endpoint`, its keys under `prefix`; checks the bucket answers.
    public init(
        endpoint: URL,
        bucket: String,
        region: String,
        accessKey: String,
        secretKey: String,
        prefix: String = "",
        partBytes: Int = 8 * 1024 * 1024
    ) async throws {
        client = S3Client(endpoint: endpoint, bucket: bucket, signer: SignatureV4(accessKey: accessKey, secretKey: secretKey, region: region))
        self.prefix = prefix
        self.partBytes = max(partBytes, Self.smallestPart)
        _ = try await client.send(.HEAD)  // the bucket exists, and the keys open it
    }

    private func key(of digest: AttachmentDigest) -> String { prefix + "attachments/" + digest.hex }
    private func folder(of upload: UploadID) -> String { prefix + "uploads/" + upload.value + "/" }

    /// The attachment's size (a `HEAD` of its object), or `nil` when the bucket does not hold it.
    public func size(of digest: AttachmentDigest) async throws -> Int64? {
        try await client.size(of: key(of: digest))
    }

    /// Streams `range` of the attachment's object (one ranged `GET`) to `chunk`.
    public func read(_ digest: AttachmentDigest, range: Range<Int64>, chunk: (ByteBuffer) async throws -> Void) async throws {
        guard !range.isEmpty else { return }
        let response = try await client.send(.GET, key: key(of: digest), headers: ["range": "bytes=\(range.lowerBound)-\(range.upperBound - 1)"])
        for try await buffer in response.body { try await chunk(buffer) }
    }

    /// The parts of an upload in order, up to the first that does not start where the ones
    /// before end (a part of a write that lost a race); of two parts at one offset, the first key
    /// (every process picks the same).
    private func parts(of upload: UploadID) async throws -> [S3Client.Part] {
        Self.chain(try await client.list(prefix: folder(of: upload)), in: folder(of: upload))
    }

    /// The run of `objects` (one upload's, in key order) from offset 0, each part starting where
    /// the one before ends; the first key wins at an offset two parts share.
    static func chain(_ objects: [S3Client.Object], in folder: String) -> [S3Client.Part] {
        var parts: [S3Client.Part] = []
        var end: Int64 = 0
        for object in objects {
            guard let offset = Self.offset(ofPart: object.key, in: folder), offset == end else { continue }
            parts.append(S3Client.Part(key: object.key, offset: offset, size: object.size, etag: object.etag))
            end += object.size
        }
        return parts
    }

    /// The offset a part's key names: `<offset>-<nonce>` (or `<offset>`, as parts were named before).
    static func offset(ofPart key: String, in folder: String) -> Int64? {
        guard key.hasPrefix(folder) else { return nil }
        return Int64(key.dropFirst(folder.count).prefix { $0 != "-" })
    }

    /// A new part's key: its offset, zero-padded so keys sort by it, and a nonce no other write shares.
    private func partKey(of upload: UploadID, at offset: Int64) -> String {
        partPrefix(of: upload, at: offset) + "-" + UploadID().value.prefix(16)
    }

    /// The keys of parts at `offset` begin so; every key of a later offset sorts after them.
    private func partPrefix(of upload: UploadID, at offset: Int64) -> String {
        folder(of: upload) + String(format: "%020lld", offset)
    }

    /// Where the upload stands when this process wrote its last part, `here`'s: its end, if the
    /// store shows that part first at its offset and no part at its end (nobody went on). The
    /// listing starts at that part's offset, so it reads a part or two however many the upload
    /// has (a `LIST` of them all grew with every append). `nil`: the store shows otherwise, or
    /// this process wrote no part of it; ask the whole listing.
    private func end(after here: WrittenHere, of upload: UploadID) async throws -> Int64? {
        guard let last = here.parts.last else { return nil }
        let folder = folder(of: upload)
        // After every key of the offset before (`~` sorts after its `-nonce` keys), so that a key of
        // the last part's offset named without a nonce, as parts were named before, is listed too.
        let startAfter = last.offset > 0 ? partPrefix(of: upload, at: last.offset - 1) + "~" : nil
        let objects = try await client.list(prefix: folder, startAfter: startAfter)
        let offsets = objects.map { Self.offset(ofPart: $0.key, in: folder) }
        guard let first = offsets.firstIndex(of: last.offset), objects[first].key == last.key, !offsets.contains(here.end) else { return nil }
        return here.end
    }

    /// What the upload's parts hold, end to end; `nil` when it has none.
    public func offset(of upload: UploadID) async throws -> Int64? {
        let parts = try await parts(of: upload)
        return parts.isEmpty ? nil : parts.reduce(0) { $0 + $1.size }
    }

    /// Writes `chunks` as parts of at most `partBytes` from `offset`, each flushed as it fills; a
    /// cut keeps the parts written and the one in memory.
    public func append<Chunks: AsyncSequence>(_ chunks: Chunks, to upload: UploadID, at offset: Int64, creating: Bool) async throws -> Int64
    where Chunks.Element == ByteBuffer {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        // The store says where the upload stands (another process may have gone on with it); what
        // this process wrote before counts only if it ends there.
        var held: Int64?
        if let here = written.withLockedValue({ $0[upload] }), here.end == offset { held = try await end(after: here, of: upload) }
        if held == nil { held = try await self.offset(of: upload) }
        guard held != nil || creating else { throw UploadNotFound() }
        guard (held ?? 0) == offset else {
            remember(nil, for: upload)
            throw UploadOffsetMismatch(expected: held ?? 0)
        }
        let exists = held != nil
        var here =
            written.withLockedValue { $0[upload] }.flatMap { $0.end == offset ? $0 : nil }
            // From nothing, this process sees every byte and can hash them; from another's offset, not.
            ?? WrittenHere(end: offset, hash: offset == 0 ? SHA256() : nil)
        defer { remember(here, for: upload) }
        var pending = ByteBuffer()
        func flush(always: Bool = false) async throws {
            guard pending.readableBytes > 0 || always else { return }
            let key = partKey(of: upload, at: here.end)
            let etag = try await client.put(key, pending)
            here.parts.append(S3Client.Part(key: key, offset: here.end, size: Int64(pending.readableBytes), etag: etag))
            here.end += Int64(pending.readableBytes)
            here.hash?.update(data: pending.readableBytesView)
            pending.clear()
        }
        do {
            for try await var buffer in chunks {
                pending.writeBuffer(&buffer)
                if pending.readableBytes >= partBytes { try await flush() }
            }
        } catch {
            // A cut connection keeps what arrived.
            try? await flush()
            throw error
        }
        // An upload begun with nothing has a part of nothing: it exists.
        try await flush(always: !exists && here.end == offset)
        return here.end
    }

    private func remember(_ here: WrittenHere?, for upload: UploadID) {
        // An upload of countless tiny appends is not worth its memory: it is read back at the end.
        let here = here.flatMap { $0.parts.count <= Self.rememberedParts ? $0 : nil }
        written.withLockedValue { written in
            if here != nil, written[upload] == nil, written.count >= Self.rememberedUploads { written.remove(at: written.startIndex) }
            written[upload] = here
        }
    }

    /// Makes the upload the attachment's object if its bytes hash to `digest`, and deletes its
    /// parts. When this process wrote every part from the first, it knows their hash already and
    /// the store copies those very parts (objects nobody writes again) into the object itself;
    /// else the upload's parts are read back in order, hashed and written as the object as they
    /// pass. Either way the object is made only of bytes that hashed to `digest`, and completed
    /// (or put) only once they did; it is written even when one is there (the type's comment).
    public func complete(_ upload: UploadID, as digest: AttachmentDigest) async throws -> Int64 {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        let here = written.withLockedValue { $0.removeValue(forKey: upload) }
        let objects = try await client.list(prefix: folder(of: upload))
        let listed = Set(objects.map(\.key))
        let target = key(of: digest)
        let size: Int64
        // An upload created empty has an empty first part, which a copy does not need.
        let wrote = here?.parts ?? []
        let own = wrote.count > 1 ? wrote.filter { $0.size > 0 } : wrote
        if let hash = here?.hash, let end = here?.end, !own.isEmpty, own.allSatisfy({ listed.contains($0.key) }), Self.copyable(own) {
            let actual = AttachmentDigest(sha256: hash.finalize())
            guard actual == digest else {
                try await discardParts(objects.map(\.key))
                throw DigestMismatch(expected: digest, actual: actual)
            }
            try await copy(own, to: target)
            joinedInStore.withLockedValue { $0 += 1 }
            size = end
        } else {
            let parts = Self.chain(objects, in: folder(of: upload))
            guard !parts.isEmpty else { throw UploadNotFound() }
            do {
                try await readBack(parts, as: digest, into: target)
            } catch let mismatch as DigestMismatch {
                try await discardParts(objects.map(\.key))
                throw mismatch
            }
            size = parts.reduce(0) { $0 + $1.size }
        }
        try await discardParts(objects.map(\.key))
        return size
    }

    /// Whether the store can join `parts` into one object itself: one part (a copy), or parts
    /// of at least S3's smallest part (5 MiB) but the last (a multipart upload of copies).
    static func copyable(_ parts: [S3Client.Part]) -> Bool {
        parts.count == 1 || parts.dropLast().allSatisfy { $0.size >= Self.smallestPart }
    }

    /// Joins the parts into the object `target` inside the store: no byte passes through this process.
    private func copy(_ parts: [S3Client.Part], to target: String) async throws {
        guard parts.count > 1 else { return try await client.copy(parts[0].key, to: target) }
        let id = try await client.createMultipart(target)
        do {
            // A few copies at once: each waits on the store's disk.
            let etags = try await Array(parts.enumerated()).concurrentMap(atOnce: Self.copiesAtOnce) { [client] index, part in
                try await client.uploadPartCopy(target, id: id, number: index + 1, from: part.key)
            }
            try await client.completeMultipart(target, id: id, parts: etags)
        } catch {
            try? await client.abortMultipart(target, id: id)
            throw error
        }
    }

    /// Reads the parts back in order, hashing them and writing the attachment's object as they
    /// pass; the object is completed (or put) only if the hash is `digest`'s.
    private func readBack(_ parts: [S3Client.Part], as digest: AttachmentDigest, into target: String) async throws {
        var writer = PartWriter(client: client, key: target, partBytes: partBytes)
        var hash = SHA256()
        do {
            for part in parts where part.size > 0 {
                for try await buffer in try await client.send(.GET, key: part.key).body {
                    hash.update(data: buffer.readableBytesView)
                    try await writer.write(buffer)
                }
            }
            let actual = AttachmentDigest(sha256: hash.finalize())
            guard actual == digest else {
                try await writer.abandon()
                throw DigestMismatch(expected: digest, actual: actual)
            }
            try await writer.finish()
        } catch let error as DigestMismatch {
            throw error
        } catch {
            try? await writer.abandon()
            throw error
        }
    }

    /// Deletes the upload's parts.
    public func discard(_ upload: UploadID) async throws {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        remember(nil, for: upload)
        try await discardParts(try await client.list(prefix: folder(of: upload)).map(\.key))
    }

    /// Deletes parts from the last: a process stopped midway leaves a run from the first part, which
    /// an upload goes on from, never parts past a gap that nothing reaches.
    private func discardParts(_ keys: [String]) async throws {
        for key in keys.reversed() { try await client.delete(key) }
    }

    /// Deletes the attachment's object unless `stillWanted` (``BlobStore/purge(_:unless:)``): it is
    /// copied aside and deleted first, and copied back if wanted after all.
    public func purge(_ digest: AttachmentDigest, unless stillWanted: @Sendable () async throws -> Bool) async throws -> Bool {
        let key = key(of: digest)
        guard try await client.size(of: key) != nil else { return false }
        // S3 has no rename: a copy aside, then the original goes, so no request reads it while the database is asked.
        let aside = prefix + "purging/" + digest.hex + "-" + UUID().uuidString
        try await client.copy(key, to: aside)
        try await client.delete(key)
        let wanted: Bool
        do {
            wanted = try await stillWanted()
        } catch {
            try? await client.copy(aside, to: key)
            throw error
        }
        if wanted, try await client.size(of: key) == nil { try await client.copy(aside, to: key) }
        try await client.delete(aside)
        return !wanted
    }

    /// Copies the attachment's object to `<prefix>quarantine/<hex>-<uuid>` and hashes the copy:
    /// true bytes (a completion replaced the object meanwhile) leave everything as it is; wrong
    /// ones are deleted from the attachment's name only if its ETag is still the one copied, so a
    /// completion writing true bytes between the copy and the delete keeps them (but for the one
    /// round trip between the ETag's check and the delete: S3 has no conditional delete everywhere).
    public func quarantine(_ digest: AttachmentDigest) async throws -> Bool {
        let key = key(of: digest)
        guard let etag = try await client.etag(of: key) else { return false }
        let aside = prefix + "quarantine/" + digest.hex + "-" + UUID().uuidString
        try await client.copy(key, to: aside)
        var hash = SHA256()
        for try await buffer in try await client.send(.GET, key: aside).body { hash.update(data: buffer.readableBytesView) }
        guard AttachmentDigest(sha256: hash.finalize()) != digest else {
            try await client.delete(aside)
            return false
        }
        guard try await client.etag(of: key) == etag else { return true }
        try await client.delete(key)
        return true
    }

    /// Deletes the uploads whose every part was written before `cutoff`, but those a request of
    /// this process works on now.
    public func discardUploads(untouchedSince cutoff: Date) async throws -> Int {
        var byUpload: [String: [S3Client.Object]] = [:]
        for object in try await client.list(prefix: prefix + "uploads/") {
            let id = object.key.dropFirst((prefix + "uploads/").count).prefix { $0 != "/" }
            byUpload[String(id), default: []].append(object)
        }
        var discarded = 0
        for (id, objects) in byUpload where objects.allSatisfy({ $0.lastModified < cutoff }) {
            guard let upload = UploadID(id) else { continue }
            do {
                try await discard(upload)
                discarded += 1
            } catch is UploadBusy {
                continue
            }
        }
        return discarded
    }
}

/// What one process wrote of an upload: where its parts end, the parts themselves (each an
/// object no other write touches: its key is new), and the hash of every byte before `end` when
/// it wrote them all from the first. Another process's append shows at the next one here (the
/// store's offset is not `end`): then the parts are read back at completion.
struct WrittenHere {
    var end: Int64
    var hash: SHA256?
    var parts: [S3Client.Part] = []
}

/// Writes an attachment's object from its bytes in order: one `PUT` when they fit in a part,
/// else a multipart upload, completed only by `finish()`.
private struct PartWriter {
    let client: S3Client
    let key: String
    let partBytes: Int
    var pending = ByteBuffer()
    var multipart: (id: String, etags: [String])?

    init(client: S3Client, key: String, partBytes: Int) {
        (self.client, self.key, self.partBytes) = (client, key, partBytes)
    }

    mutating func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        pending.writeBuffer(&buffer)
        guard pending.readableBytes >= partBytes else { return }
        if multipart == nil { multipart = (try await client.createMultipart(key), []) }
        let etag = try await client.uploadPart(key, id: multipart!.id, number: multipart!.etags.count + 1, pending)
        multipart!.etags.append(etag)
        pending.clear()
    }

    mutating func finish() async throws {
        guard let multipart else {
            try await client.put(key, pending)
            return
        }
        var etags = multipart.etags
        if pending.readableBytes > 0 { etags.append(try await client.uploadPart(key, id: multipart.id, number: etags.count + 1, pending)) }
        try await client.completeMultipart(key, id: multipart.id, parts: etags)
    }

    func abandon() async throws {
        if let multipart { try await client.abortMultipart(key, id: multipart.id) }
    }
}
