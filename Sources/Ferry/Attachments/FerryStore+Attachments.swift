import FerryProtocol
import Foundation
import GRDB

/// Attachments in the store (PROTOCOL.md, "Attachments"): photos and files whose bytes live in the
/// store's folder and whose digests live in the app's rows.
extension FerryStore {
    /// Where the store keeps its attachments: `<store>.attachments/`.
    var attachmentFolder: AttachmentFolder { AttachmentFolder(storePath: path) }

    /// Takes the file at `url` into the store, streamed and hashed (the file itself is not
    /// changed), and returns its digest to write in an attachment column of a row. The bytes
    /// wait for upload from now on; a change of a row referencing them goes to the server only
    /// after them. Attaching the same bytes again returns the same digest and stores nothing more.
    ///
    /// A crash between this and the row's commit leaves bytes no row references, which the store
    /// removes a day later.
    ///
    /// Uploads go the highest `priority` first (a signature before the day's photos). With
    /// `space`, the row it goes in lives in that space: one the user may only read is refused at
    /// once, before any byte is copied.
    ///
    /// - Throws: ``FerryError/Code/attachment`` when the file cannot be read;
    ///   ``FerryError/Code/readOnlySpace`` for a space the user may only read.
    public func attach(
        fileAt url: URL,
        contentType: String? = nil,
        priority: AttachmentPriority = .normal,
        space: String? = nil
    ) async throws -> String {
        if let space, let role = try await database.read({ db in try SpaceMemberships.role(in: space, db: db) }), !role.canWrite {
            throw FerryError.readOnlySpace(SpaceGuard.message(space: space, role: role.rawValue))
        }
        if let contentType, !MediaType.isValid(contentType) {
            throw FerryError.attachment("contentType '\(contentType.prefix(40))' is not a media type (type/subtype, like image/jpeg)")
        }
        let folder = attachmentFolder
        let (digest, size): (AttachmentDigest, Int64)
        do {
            (digest, size) = try await offCooperativeThreads("ferry.attach") { try folder.copyIn(url) }
        } catch {
            throw FerryError.attachment("cannot read \(url.path) to attach it: \(error.localizedDescription)")
        }
        try await database.write { db in try AttachmentTable.attached(digest, size: size, contentType: contentType, priority: priority, db: db) }
        _ = folder.file(digest, contentType: contentType)  // its named link, for localAttachment
        // A sweep that found the same bytes unreferenced may have removed them after the copy
        // found them there: noted now, they stay; gone, they are copied again.
        if !folder.holds(digest) {
            _ = try await offCooperativeThreads("ferry.attach") { try folder.copyIn(url) }
        }
        return digest.description
    }

    /// Gives up an attached file that will not be sent (a photo the user took back before
    /// writing it in a row): it no longer waits for upload, counts in no badge, and its file goes.
    /// Refused while a row, a queued change or a dead letter references it (change or discard
    /// that first: its record would lose its photo).
    ///
    /// - Throws: ``FerryError/Code/attachment`` for a value that is not a digest, or one a row,
    ///   a queued change or a dead letter references.
    public func discardAttachment(_ digest: String) async throws {
        guard let parsed = AttachmentDigest(digest) else { throw FerryError.attachment(AttachmentDigest.problem(with: digest)) }
        let (tables, folder) = (self.tables, attachmentFolder)
        try await database.write { db in
            if try OutboxTable.queuedChangeReferences(digest, db: db) {
                throw FerryError.attachment(
                    "attachment \(digest) is referenced by a queued change or a dead letter; discard or change that change first"
                )
            }
            // A row's photo the server may not hold: giving up its upload could lose it.
            if try Self.referencedDigests(tables, db: db).contains(digest) {
                throw FerryError.attachment("attachment \(digest) is referenced by a row; change that row first")
            }
            try AttachmentTable.forget([parsed], db: db)
            folder.remove(parsed)
        }
    }

    /// The local file of the attachment `digest` if the store holds it whole, without
    /// downloading it (``FerryClient/attachment(_:)`` downloads). Its name ends with an extension
    /// a viewer understands (`.jpg`) when its media type is a common one.
    public func localAttachment(_ digest: String) -> URL? {
        guard let parsed = AttachmentDigest(digest), attachmentFolder.holds(parsed) else { return nil }
        // The named link `attach`, `attachment(_:)` or `attachmentInfo(_:)` made; no database read
        // here, so it may be called anywhere, a database observation's closure included.
        return attachmentFolder.namedFile(parsed)
    }

    /// What the store knows of the attachment `digest`: its size, media type, whether its file is
    /// here and whether it waits for upload; `nil` when the store knows nothing of it (a row
    /// pulled whose photo was never fetched).
    public func attachmentInfo(_ digest: String) async throws -> AttachmentInfo? {
        guard let parsed = AttachmentDigest(digest) else { throw FerryError.attachment(AttachmentDigest.problem(with: digest)) }
        let folder = attachmentFolder
        return try await database.read { db in try AttachmentTable.row(parsed, db: db) }.map { row in
            AttachmentInfo(
                digest: digest,
                size: row.size,
                contentType: row.contentType,
                localFile: row.stored && folder.holds(parsed) ? folder.file(parsed, contentType: row.contentType) : nil,
                waitsForUpload: row.waitsForUpload
            )
        }
    }

    /// Removes the files no row references any more (a revoked space's, a deleted record's), and
    /// downloaded ones past `budget` bytes, least recently used first. An attachment a queued
    /// change or a dead letter references stays (``AttachmentTable/evictable(toFit:db:)``); one
    /// waiting for upload stays a day after it was attached otherwise.
    /// Files go inside the transaction that forgets them, so an `attach` of the same bytes,
    /// noting them after it, finds whether they are there. Returns how many files went.
    @discardableResult
    func sweepAttachments(budget: Int64) async throws -> Int {
        guard tables.contains(where: { !$0.attachments.isEmpty }) || FileManager.default.fileExists(atPath: attachmentFolder.url.path) else {
            return 0
        }
        let (tables, folder) = (self.tables, attachmentFolder)
        let gone = try await database.write { db -> Int in
            let rows = try AttachmentTable.all(db)
            // The rows' digests are read only when some attachment is known: a pull of a store without any reads none.
            let referenced = rows.isEmpty ? [] : try Self.referencedDigests(tables, db: db)
            let dayAgo = Date().timeIntervalSince1970 - 86_400
            var gone: [AttachmentDigest] = []
            // A change still queued, or set aside as a dead letter, may yet be sent with it.
            let pinned = rows.isEmpty ? [] : try OutboxTable.attachmentDigests(includingDeadLetters: true, db: db)
            for row in rows where !referenced.contains(row.digest.description) {
                if pinned.contains(row.digest.description) { continue }
                if row.waitsForUpload, row.usedAt > dayAgo { continue }
                gone.append(row.digest)
            }
            try AttachmentTable.forget(gone, db: db)
            let evicted = try AttachmentTable.evictable(toFit: budget, db: db)
            try AttachmentTable.evicted(evicted, db: db)
            for digest in gone + evicted { folder.remove(digest) }
            return gone.count + evicted.count
        }
        let known = try await database.read { db in Set(try AttachmentTable.all(db).filter(\.stored).map(\.digest)) }
        folder.removeOrphans(known: known, olderThan: Date(timeIntervalSinceNow: -86_400))
        return gone
    }

    /// Evicts downloaded files past `budget` bytes, least recently used first, but `kept` (the
    /// one the app just asked for). Files go inside the transaction that forgets them.
    func evictAttachments(toFit budget: Int64, keeping kept: AttachmentDigest) async throws {
        let folder = attachmentFolder
        try await database.write { db in
            let evicted = try AttachmentTable.evictable(toFit: budget, db: db).filter { $0 != kept }
            try AttachmentTable.evicted(evicted, db: db)
            for digest in evicted { folder.remove(digest) }
        }
    }

    /// Every digest a row of a synced table holds in an attachment column.
    private static func referencedDigests(_ tables: [SyncedTable], db: Database) throws -> Set<String> {
        try tables.reduce(into: []) { $0.formUnion(try $1.heldDigests(db: db)) }
    }
}
