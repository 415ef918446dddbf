import FerryProtocol
import Foundation

#if canImport(CryptoKit)
import CryptoKit
#else
import Crypto
#endif

/// Where a store keeps its attachments' bytes: a folder beside its file (`<store>.attachments/`),
/// one file per attachment named by its digest's hex digits. The database names digests, never
/// paths, so a relaunch or a moved app container finds them. A file takes its name only by the
/// rename of one whose bytes were hashed to it: a crash never leaves a partial file under a
/// digest's name.
struct AttachmentFolder: Sendable {
    /// The folder.
    let url: URL
    /// How much of a file is read or written at once: memory holds this, never a whole file.
    static let chunkBytes = 1 << 20

    init(storePath: String) {
        url = URL(fileURLWithPath: storePath + ".attachments", isDirectory: true)
    }

    /// The whole attachment's file.
    func file(_ digest: AttachmentDigest) -> URL { url.appendingPathComponent(digest.hex) }

    /// The attachment's file under a name a viewer understands (`<hex>.jpg`: a hard link to the
    /// file, made once) when `contentType` has a known extension; the file itself otherwise.
    func file(_ digest: AttachmentDigest, contentType: String?) -> URL {
        let plain = file(digest)
        guard let ext = contentType.flatMap(Self.fileExtension(for:)) else { return plain }
        let named = url.appendingPathComponent(digest.hex + "." + ext)
        if !FileManager.default.fileExists(atPath: named.path) { try? FileManager.default.linkItem(at: plain, to: named) }
        return FileManager.default.fileExists(atPath: named.path) ? named : plain
    }

    /// The extensions of common media types.
    static let extensions = [
        "image/jpeg": "jpg", "image/png": "png", "image/heic": "heic", "image/heif": "heif", "image/gif": "gif", "image/webp": "webp",
        "image/tiff": "tiff", "video/mp4": "mp4", "video/quicktime": "mov", "audio/mpeg": "mp3", "audio/mp4": "m4a",
        "application/pdf": "pdf", "text/plain": "txt", "text/csv": "csv", "application/json": "json", "application/zip": "zip",
    ]

    /// The file extension of a common media type; `nil` for others.
    static func fileExtension(for contentType: String) -> String? {
        extensions[contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""]
    }

    /// The attachment's named link if one was made, else its file: no database read.
    func namedFile(_ digest: AttachmentDigest) -> URL {
        namedLinks(digest).first ?? file(digest)
    }

    /// The links `file(_:contentType:)` made for the attachment (`<hex>.<ext>`), found by their
    /// possible names, never by listing the folder.
    private func namedLinks(_ digest: AttachmentDigest) -> [URL] {
        Set(Self.extensions.values).sorted().map { url.appendingPathComponent(digest.hex + "." + $0) }
            .filter { FileManager.default.fileExists(atPath: $0.path) }
    }

    /// Whether the whole attachment is here.
    func holds(_ digest: AttachmentDigest) -> Bool { FileManager.default.fileExists(atPath: file(digest).path) }

    /// Copies the file at `source` in, hashing its bytes as they pass; returns their digest and size.
    func copyIn(_ source: URL) throws -> (digest: AttachmentDigest, size: Int64) {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        let incoming = url.appendingPathComponent("incoming-" + UUID().uuidString)
        guard FileManager.default.createFile(atPath: incoming.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: incoming.path])
        }
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            let output = try FileHandle(forWritingTo: incoming)
            defer { try? output.close() }
            while let chunk = try input.read(upToCount: Self.chunkBytes), !chunk.isEmpty {
                hasher.update(data: chunk)
                try output.write(contentsOf: chunk)
                size += Int64(chunk.count)
            }
            try output.synchronize()
        } catch {
            try? FileManager.default.removeItem(at: incoming)
            throw error
        }
        let digest = AttachmentDigest(sha256: hasher.finalize())
        try place(incoming, as: digest)
        return (digest, size)
    }

    /// Names `file`, whose bytes hash to `digest`, as the attachment's file (the same bytes
    /// already there: `file` goes).
    func place(_ file: URL, as digest: AttachmentDigest) throws {
        let target = self.file(digest)
        guard !FileManager.default.fileExists(atPath: target.path) else {
            try? FileManager.default.removeItem(at: file)
            return
        }
        do {
            try FileManager.default.moveItem(at: file, to: target)
        } catch  where FileManager.default.fileExists(atPath: target.path) {
            try? FileManager.default.removeItem(at: file)  // another process placed the same bytes first
        }
    }

    /// The digest and size of the bytes of `file`, read a chunk at a time; with
    /// `synchronizing`, the file is on the disk before this returns (it is about to be named whole).
    static func digest(of file: URL, synchronizing: Bool = false) throws -> (digest: AttachmentDigest, size: Int64) {
        let input = try FileHandle(forReadingFrom: file)
        defer { try? input.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let chunk = try input.read(upToCount: chunkBytes), !chunk.isEmpty {
            hasher.update(data: chunk)
            size += Int64(chunk.count)
        }
        if synchronizing { try input.synchronize() }
        return (AttachmentDigest(sha256: hasher.finalize()), size)
    }

    /// Up to `count` bytes of the attachment's file from `offset`.
    func read(_ digest: AttachmentDigest, at offset: Int64, count: Int) throws -> Data {
        let input = try FileHandle(forReadingFrom: file(digest))
        defer { try? input.close() }
        try input.seek(toOffset: UInt64(offset))
        return try input.read(upToCount: count) ?? Data()
    }

    // MARK: Downloads

    /// A `.part` file for a download of `digest`, held by an exclusive `flock` until `lock` is
    /// closed, so no other download writes it: the largest one a download before left (a cut, or
    /// a crash: the system releases a dead process's locks, so a relaunch goes on at once), else a
    /// new empty one.
    func claimPartial(_ digest: AttachmentDigest) throws -> (url: URL, lock: FileHandle) {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [])
            .filter { $0.hasPrefix(digest.hex + ".") && $0.hasSuffix(".part") }
            .map { url.appendingPathComponent($0) }
            .sorted { size(of: $0) > size(of: $1) }
        for part in left {
            if let lock = Self.lock(part) { return (part, lock) }
        }
        while true {
            let mine = url.appendingPathComponent("\(digest.hex).\(UUID().uuidString).part")
            guard FileManager.default.createFile(atPath: mine.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: mine.path])
            }
            if let lock = Self.lock(mine) { return (mine, lock) }  // else another download took it first
        }
    }

    /// An exclusive lock on `part`, or `nil` when another download holds it or it is gone. On a
    /// file system without locks (some network and FUSE mounts) the part is used unlocked, as a
    /// single download would.
    private static func lock(_ part: URL) -> FileHandle? {
        guard let handle = try? FileHandle(forUpdating: part) else { return nil }
        let held = flock(handle.fileDescriptor, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK
        // Named whole or removed between the listing and the lock (its download ended): not a part any more.
        guard !held, FileManager.default.fileExists(atPath: part.path) else {
            try? handle.close()
            return nil
        }
        return handle
    }

    /// Appends `bytes` to a download's `.part` file.
    func append(_ bytes: Data, to partial: URL) throws {
        let output = try FileHandle(forWritingTo: partial)
        defer { try? output.close() }
        try output.seekToEnd()
        try output.write(contentsOf: bytes)
    }

    /// Empties a download's `.part` file.
    func truncate(_ partial: URL) throws {
        let output = try FileHandle(forWritingTo: partial)
        defer { try? output.close() }
        try output.truncate(atOffset: 0)
    }

    /// A file's size (0 when there is none).
    func size(of file: URL) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.int64Value ?? 0
    }

    /// Removes the attachment's file, and its named links.
    func remove(_ digest: AttachmentDigest) {
        for link in namedLinks(digest) { try? FileManager.default.removeItem(at: link) }
        try? FileManager.default.removeItem(at: file(digest))
    }

    /// Removes the files no row names (`known`) last changed before `cutoff`: bytes copied in by
    /// an `attach` whose row never committed, and incoming copies and downloads a crash cut short.
    func removeOrphans(known: Set<AttachmentDigest>, olderThan cutoff: Date) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        for name in names {
            // The file of a known attachment, or a named link to it (`<hex>.jpg`).
            let parts = name.split(separator: ".")
            if let digest = AttachmentDigest("sha256:" + (parts.first ?? "")), known.contains(digest),
                parts.count == 1 || !name.hasSuffix(".part") && parts.count == 2
            {
                continue
            }
            let file = url.appendingPathComponent(name)
            let changed = (try? FileManager.default.attributesOfItem(atPath: file.path))?[.modificationDate] as? Date
            guard let changed, changed < cutoff else { continue }
            guard name.hasSuffix(".part") else {
                try? FileManager.default.removeItem(at: file)
                continue
            }
            // A part a download holds now is not an orphan, however long it has waited: it is
            // removed under its lock, so a download claiming it meanwhile finds it gone.
            guard let lock = Self.lock(file) else { continue }
            try? FileManager.default.removeItem(at: file)
            try? lock.close()
        }
    }

    /// Removes the folder and everything in it (a sign-out that erases the store).
    static func removeAll(besideStoreAt path: String) {
        try? FileManager.default.removeItem(at: AttachmentFolder(storePath: path).url)
    }
}
