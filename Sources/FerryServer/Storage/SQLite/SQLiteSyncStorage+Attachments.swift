import FerryProtocol
import Foundation
import GRDB

/// Attachments on SQLite: who uploaded what, and who may read what (PROTOCOL.md, "Attachments").
extension SQLiteSyncStorage {
    /// Notes that `userID` uploaded the attachment (``SyncStorage/noteUpload(of:size:contentType:by:)``).
    public func noteUpload(of digest: AttachmentDigest, size: Int64, contentType: String?, by userID: String) async throws {
        try await mapErrors {
            try await writer.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO attachment_uploads (user_id, digest, size, uploaded_at, content_type) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (user_id, digest) DO UPDATE SET size = excluded.size, uploaded_at = excluded.uploaded_at,
                            content_type = coalesce(excluded.content_type, content_type)
                        """,
                    arguments: [userID, digest.description, size, serverMilliseconds(), contentType]
                )
            }
        }
    }

    /// The media type an upload of the attachment said (``SyncStorage/contentType(of:)``).
    public func contentType(of digest: AttachmentDigest) async throws -> String? {
        try await mapErrors {
            try await writer.read { db in
                try String.fetchOne(
                    db,
                    sql: "SELECT content_type FROM attachment_uploads WHERE digest = ? AND content_type IS NOT NULL ORDER BY uploaded_at LIMIT 1",
                    arguments: [digest.description]
                )
            }
        }
    }

    /// Those of `digests` that `caller` may read (``SyncStorage/readableAttachments(_:by:)``).
    public func readableAttachments(_ digests: [AttachmentDigest], by caller: Caller) async throws -> Set<AttachmentDigest> {
        try await mapErrors {
            try await writer.read { db in
                Set(try Self.readableAttachments(digests.map(\.description), by: caller, db: db).compactMap(AttachmentDigest.init))
            }
        }
    }

    /// Those of `digests` that `caller` may read: uploaded by them, or referenced by a live record
    /// of theirs or of a space they are a member of, or released by one less than a day ago
    /// (until the janitor's sweep). A service may read every attachment the server knows.
    static func readableAttachments(_ digests: [String], by caller: Caller, db: Database) throws -> Set<String> {
        let list = String(decoding: try JSONEncoder().encode(digests), as: UTF8.self)
        let sql =
            caller.isService
            ? """
            SELECT digest FROM attachment_uploads WHERE digest IN (SELECT value FROM json_each(?1))
            UNION SELECT digest FROM attachment_refs WHERE digest IN (SELECT value FROM json_each(?1))
            """
            : """
            SELECT digest FROM attachment_uploads WHERE user_id = ?2 AND digest IN (SELECT value FROM json_each(?1))
            UNION
            SELECT a.digest FROM attachment_refs a
            JOIN records r ON r.user_id = a.partition AND r.entity = a.entity AND r.entity_id = a.entity_id
                AND (r.deleted = 0 OR a.released_at IS NOT NULL)
            WHERE a.digest IN (SELECT value FROM json_each(?1))
                AND (a.partition = ?2 OR a.partition IN (SELECT char(1) || space_key FROM space_members WHERE user_id = ?2))
            """
        return Set(try String.fetchAll(db.cachedStatement(sql: sql), arguments: caller.isService ? [list] : [list, caller.userID]))
    }

    /// Forgets old uploads of unreferenced attachments and references released before `cutoff`
    /// (``SyncStorage/expireAttachmentUploads(before:)``).
    public func expireAttachmentUploads(before cutoff: Int64) async throws -> [AttachmentDigest] {
        try await mapErrors {
            try await writer.write { db in
                // The released references go first: the uploads they alone kept then go with them.
                let released = try String.fetchAll(
                    db,
                    sql: "DELETE FROM attachment_refs WHERE released_at < ? RETURNING digest",
                    arguments: [cutoff]
                )
                let expired = try String.fetchAll(
                    db,
                    sql: """
                        DELETE FROM attachment_uploads AS u WHERE uploaded_at < ?
                            AND NOT EXISTS (SELECT 1 FROM attachment_refs r WHERE r.digest = u.digest
                                AND (r.partition = u.user_id
                                    OR r.partition IN (SELECT char(1) || space_key FROM space_members m WHERE m.user_id = u.user_id)))
                        RETURNING digest
                        """,
                    arguments: [cutoff]
                )
                return try Set(expired + released).filter { try !Self.wants($0, db: db) }.compactMap(AttachmentDigest.init).sorted { $0.hex < $1.hex }
            }
        }
    }

    /// Whether anyone may read the attachment (``SyncStorage/wantsAttachment(_:)``).
    public func wantsAttachment(_ digest: AttachmentDigest) async throws -> Bool {
        try await mapErrors { try await writer.read { db in try Self.wants(digest.description, db: db) } }
    }

    /// Every attachment the database knows (``SyncStorage/storedAttachments()``).
    public func storedAttachments() async throws -> [StoredAttachment] {
        try await mapErrors {
            try await writer.read { db in
                let uploads = try Row.fetchAll(db, sql: "SELECT digest, user_id, size, content_type FROM attachment_uploads").map {
                    (digest: $0[0] as String, user: $0[1] as String, size: $0[2] as Int64, contentType: $0[3] as String?)
                }
                let references = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT a.digest, s.id, a.partition, a.entity, a.entity_id, a.released_at IS NOT NULL
                        FROM attachment_refs a LEFT JOIN spaces s ON a.partition = char(1) || s.key
                        ORDER BY a.partition, a.entity, a.entity_id
                        """
                )
                .map { row in
                    let space: String? = row[1]
                    return (
                        digest: row[0] as String,
                        reference: StoredAttachment.Reference(
                            space: space,
                            user: space == nil ? row[2] : nil,
                            entity: row[3],
                            entityID: row[4],
                            released: row[5]
                        )
                    )
                }
                return StoredAttachment.list(uploads: uploads, references: references)
            }
        }
    }

    /// What `userID`'s attachments take (``SyncStorage/attachmentUse(of:excluding:)``).
    public func attachmentUse(of userID: String, excluding: UploadID?) async throws -> AttachmentUse {
        try await mapErrors {
            try await writer.read { db in
                let kept =
                    try Int64.fetchOne(db, sql: "SELECT coalesce(sum(size), 0) FROM attachment_uploads WHERE user_id = ?", arguments: [userID]) ?? 0
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT count(*), coalesce(sum(max(held, coalesce(length, 0))), 0) FROM open_uploads WHERE user_id = ? AND upload_id != ?",
                    arguments: [userID, excluding?.value ?? ""]
                )
                return AttachmentUse(kept: kept, unfinished: row?[0] ?? 0, unfinishedBytes: row?[1] ?? 0)
            }
        }
    }

    /// The upload in progress `upload` (``SyncStorage/openUpload(_:)``).
    public func openUpload(_ upload: UploadID) async throws -> OpenUpload? {
        try await mapErrors {
            try await writer.read { db in
                try Row.fetchOne(db, sql: "SELECT user_id, digest, length, held FROM open_uploads WHERE upload_id = ?", arguments: [upload.value])
                    .flatMap { row in
                        AttachmentDigest(row[1] as String).map {
                            OpenUpload(upload: upload, userID: row[0], digest: $0, length: row[2], held: row[3])
                        }
                    }
            }
        }
    }

    /// Notes an upload in progress (``SyncStorage/noteOpenUpload(_:within:)``): one write
    /// transaction counts and notes, so no other request comes between.
    @discardableResult
    public func noteOpenUpload(_ upload: OpenUpload, within cap: Int?) async throws -> Bool {
        try await mapErrors {
            try await writer.write { db in
                if let cap {
                    let others =
                        try Int.fetchOne(
                            db,
                            sql: "SELECT count(*) FROM open_uploads WHERE user_id = ? AND upload_id != ?",
                            arguments: [upload.userID, upload.upload.value]
                        ) ?? 0
                    guard others < cap else { return false }
                }
                try db.execute(
                    sql: """
                        INSERT OR REPLACE INTO open_uploads (upload_id, user_id, digest, length, held, touched_at, content_type)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        upload.upload.value, upload.userID, upload.digest.description, upload.length, upload.held, serverMilliseconds(),
                        upload.contentType,
                    ]
                )
                return true
            }
        }
    }

    /// Forgets an upload in progress (``SyncStorage/closeUpload(_:)``).
    public func closeUpload(_ upload: UploadID) async throws {
        try await mapErrors {
            try await writer.write { db in try db.execute(sql: "DELETE FROM open_uploads WHERE upload_id = ?", arguments: [upload.value]) }
        }
    }

    /// Forgets the uploads in progress untouched since `cutoff` (``SyncStorage/expireOpenUploads(before:)``).
    public func expireOpenUploads(before cutoff: Int64) async throws -> Int {
        try await mapErrors {
            try await writer.write { db in
                try db.execute(sql: "DELETE FROM open_uploads WHERE touched_at < ?", arguments: [cutoff])
                return db.changesCount
            }
        }
    }

    private static func wants(_ digest: String, db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                SELECT EXISTS (SELECT 1 FROM attachment_uploads WHERE digest = ?1)
                    OR EXISTS (SELECT 1 FROM attachment_refs WHERE digest = ?1)
                """,
            arguments: [digest]
        ) ?? true
    }
}
