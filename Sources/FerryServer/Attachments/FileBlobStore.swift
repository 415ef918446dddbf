import Crypto
import FerryProtocol
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOFileSystem

/// Attachments in a folder (`file:`, the default): `blobs/ab/<digest>` for whole ones,
/// `uploads/<id>` for uploads in progress. A whole attachment appears only by a rename of a
/// file whose bytes were hashed, so no reader ever sees a half-written one, whatever stops the
/// process; an upload keeps every byte that reached the disk and goes on from there.
///
/// An upload is hashed from its file when it completes, never from a hash kept between
/// requests: another process, or a restore, may have changed the file meanwhile (review). One
/// request of this process works on an upload at a time (`UploadBusy` otherwise); processes
/// sharing one folder are not supported yet.
public struct FileBlobStore: BlobStore {
    /// The folder the store keeps its files in.
    public let folder: FilePath
    let fileSystem = FileSystem.shared
    /// The uploads a request of this process works on now.
    private let busy = NIOLockedValueBox(Set<UploadID>())

    /// A store in `folder`, created if missing.
    public init(folder: String) async throws {
        self.folder = FilePath(folder)
        for sub in ["blobs", "uploads"] {
            try await fileSystem.createDirectory(at: self.folder.appending(sub), withIntermediateDirectories: true)
        }
    }

    func path(of digest: AttachmentDigest) -> FilePath {
        folder.appending("blobs").appending(String(digest.hex.prefix(2))).appending(digest.hex)
    }

    private func path(of upload: UploadID) -> FilePath {
        folder.appending("uploads").appending(upload.value)
    }

    /// The size of the attachment, or `nil` when the store does not hold it.
    public func size(of digest: AttachmentDigest) async throws -> Int64? {
        try await fileSystem.info(forFileAt: path(of: digest))?.size
    }

    /// Calls `chunk` with the bytes of `range` of the attachment, in chunks of 256 KiB.
    public func read(_ digest: AttachmentDigest, range: Range<Int64>, chunk: (ByteBuffer) async throws -> Void) async throws {
        try await fileSystem.withFileHandle(forReadingAt: path(of: digest)) { handle in
            for try await bytes in handle.readChunks(in: range, chunkLength: .kibibytes(256)) {
                try await chunk(bytes)
            }
        }
    }

    /// The bytes an upload holds so far, or `nil` when there is no such upload.
    public func offset(of upload: UploadID) async throws -> Int64? {
        try await fileSystem.info(forFileAt: path(of: upload))?.size
    }

    /// Appends `chunks` at `offset`, which must be the upload's size (`UploadOffsetMismatch`
    /// otherwise, nothing written); what arrived before a failure stays. Returns the new offset.
    public func append<Chunks: AsyncSequence>(_ chunks: Chunks, to upload: UploadID, at offset: Int64, creating: Bool) async throws -> Int64
    where Chunks.Element == ByteBuffer {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        guard let held = try await self.offset(of: upload) ?? (creating ? 0 : nil) else { throw UploadNotFound() }
        guard held == offset else { throw UploadOffsetMismatch(expected: held) }
        var written = offset
        try await fileSystem.withFileHandle(forWritingAt: path(of: upload), options: .modifyFile(createIfNecessary: true)) { handle in
            var writer = handle.bufferedWriter(startingAtAbsoluteOffset: offset)
            do {
                for try await bytes in chunks {
                    try await writer.write(contentsOf: bytes)
                    written += Int64(bytes.readableBytes)
                }
            } catch {
                // What arrived stays: the upload goes on from it.
                try? await writer.flush()
                throw error
            }
            try await writer.flush()
        }
        return written
    }

    /// Makes the upload the attachment `digest` if its bytes hash to it (by a rename), else
    /// discards it and throws `DigestMismatch`. Returns the attachment's size.
    public func complete(_ upload: UploadID, as digest: AttachmentDigest) async throws -> Int64 {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        let file = path(of: upload)
        guard let size = try await fileSystem.info(forFileAt: file)?.size else { throw UploadNotFound() }
        // On the disk before it is named as whole: after a power cut, no file under an
        // attachment's name holds less than its bytes (review).
        let actual = try await Self.digest(of: file, synchronizing: true)
        guard actual == digest else {
            _ = try? await fileSystem.removeItem(at: file)
            throw DigestMismatch(expected: digest, actual: actual)
        }
        let destination = path(of: digest)
        try await fileSystem.createDirectory(at: destination.removingLastComponent(), withIntermediateDirectories: true)
        // Always renamed over what is there (rename(2) replaces at once): true bytes replace wrong
        // ones, and bytes another user holds take the path and time of new ones (BlobStore).
        try Self.rename(file, to: destination)
        try await fileSystem.withDirectoryHandle(atPath: destination.removingLastComponent()) { try await $0.synchronize() }
        return size
    }

    /// Renames `source` to `destination`, replacing it in one step: a reader sees the old file or
    /// the new one, never none (NIOFileSystem's `replaceItem` removes, then moves).
    private static func rename(_ source: FilePath, to destination: FilePath) throws {
        guard Foundation.rename(source.string, destination.string) == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
    }

    /// Discards an upload in progress.
    public func discard(_ upload: UploadID) async throws {
        guard busy.withLockedValue({ $0.insert(upload).inserted }) else { throw UploadBusy() }
        defer { _ = busy.withLockedValue { $0.remove(upload) } }
        try await fileSystem.removeItem(at: path(of: upload))
    }

    /// Discards the uploads whose file was last written to before `cutoff`, but for those a
    /// request works on now.
    public func discardUploads(untouchedSince cutoff: Date) async throws -> Int {
        var discarded = 0
        let folder = self.folder.appending("uploads")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.string)) ?? [] {
            guard let upload = UploadID(name),
                let modified = try await fileSystem.info(forFileAt: folder.appending(name))?.lastDataModificationTime,
                Date(timeIntervalSince1970: Double(modified.seconds) + Double(modified.nanoseconds) / 1e9) < cutoff
            else { continue }
            do {
                try await discard(upload)
                discarded += 1
            } catch is UploadBusy {
                continue
            }
        }
        return discarded
    }

    /// Deletes the attachment unless `stillWanted` (``BlobStore/purge(_:unless:)``): its file is
    /// renamed aside first, so no request reads it while the database is asked, and an upload
    /// completing meanwhile finds no file and places its own.
    public func purge(_ digest: AttachmentDigest, unless stillWanted: @Sendable () async throws -> Bool) async throws -> Bool {
        let file = path(of: digest)
        let aside = folder.appending("uploads").appending("purging-\(digest.hex)-\(UUID().uuidString)")
        try await fileSystem.createDirectory(at: aside.removingLastComponent(), withIntermediateDirectories: true)
        guard try await fileSystem.info(forFileAt: file) != nil else { return false }
        try await fileSystem.moveItem(at: file, to: aside)
        let wanted: Bool
        do {
            wanted = try await stillWanted()
        } catch {
            try? await fileSystem.moveItem(at: aside, to: file)
            throw error
        }
        if wanted, try await fileSystem.info(forFileAt: file) == nil {
            try await fileSystem.moveItem(at: aside, to: file)
            return false
        }
        _ = try? await fileSystem.removeItem(at: aside)
        return !wanted
    }
}

extension FileBlobStore {
    /// Renames the attachment's file to `quarantine/<hex>-<uuid>`, unless it hashes to `digest`
    /// after all (a completion renamed true bytes over it meanwhile): then it goes back, if no
    /// other completion placed one since (``BlobStore/quarantine(_:)``).
    public func quarantine(_ digest: AttachmentDigest) async throws -> Bool {
        let file = path(of: digest)
        let aside = folder.appending("quarantine").appending("\(digest.hex)-\(UUID().uuidString)")
        try await fileSystem.createDirectory(at: aside.removingLastComponent(), withIntermediateDirectories: true)
        guard try await fileSystem.info(forFileAt: file) != nil else { return false }
        try await fileSystem.moveItem(at: file, to: aside)
        guard try await Self.digest(of: aside) == digest else { return true }
        if try await fileSystem.info(forFileAt: file) == nil { try? await fileSystem.moveItem(at: aside, to: file) }
        _ = try? await fileSystem.removeItem(at: aside)
        return false
    }

    /// The digest of the bytes of `file`, read a MiB at a time; with `synchronizing`, the file
    /// is on the disk before this returns.
    static func digest(of file: FilePath, synchronizing: Bool = false) async throws -> AttachmentDigest {
        var hash = SHA256()
        try await FileSystem.shared.withFileHandle(forReadingAt: file) { handle in
            for try await bytes in handle.readChunks(chunkLength: .mebibytes(1)) { hash.update(data: bytes.readableBytesView) }
            if synchronizing { try await handle.synchronize() }
        }
        return AttachmentDigest(sha256: hash.finalize())
    }
}

/// Another request appends to the upload, completes or discards it, now.
public struct UploadBusy: Error, Sendable {}

/// No upload of that id.
public struct UploadNotFound: Error, Sendable {}
