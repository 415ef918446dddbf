import FerryProtocol
import Foundation
import Logging
import PostgresNIO

/// Attachments on PostgreSQL: who uploaded what, and who may read what (PROTOCOL.md, "Attachments").
extension PostgresSyncStorage {
    /// Notes that `userID` uploaded the attachment (``SyncStorage/noteUpload(of:size:contentType:by:)``).
    public func noteUpload(of digest: AttachmentDigest, size: Int64, contentType: String?, by userID: String) async throws {
        _ = try await withDatabase { [logger] db in
            try await db.query(
                """
                INSERT INTO attachment_uploads (user_id, digest, size, uploaded_at, content_type)
                VALUES (\(userID), \(digest.description), \(size), \(serverMilliseconds()), \(contentType))
                ON CONFLICT (user_id, digest) DO UPDATE SET size = excluded.size, uploaded_at = excluded.uploaded_at,
                    content_type = coalesce(excluded.content_type, attachment_uploads.content_type)
                """,
                logger: logger
            )
        }
    }

    /// The media type an upload of the attachment said (``SyncStorage/contentType(of:)``).
    public func contentType(of digest: AttachmentDigest) async throws -> String? {
        try await withDatabase { [logger] db in
            for try await type in try await db.query(
                """
                SELECT content_type FROM attachment_uploads WHERE digest = \(digest.description) AND content_type IS NOT NULL
                ORDER BY uploaded_at LIMIT 1
                """,
                logger: logger
            ).decode(String.self) {
                return type
            }
            return nil
        }
    }

    /// Those of `digests` that `caller` may read (``SyncStorage/readableAttachments(_:by:)``).
    public func readableAttachments(_ digests: [AttachmentDigest], by caller: Caller) async throws -> Set<AttachmentDigest> {
        try await withDatabase { [logger] db in
            Set(try await Self.readableAttachments(digests.map(\.description), by: caller, db: db, logger: logger).compactMap(AttachmentDigest.init))
        }
    }

    /// Those of `digests` that `caller` may read: uploaded by them, or referenced by a live record
    /// of theirs or of a space they are a member of, or released by one less than a day ago
    /// (until the janitor's sweep). A service may read every attachment the server knows. Each
    /// reference probes `records` by its primary key (a LATERAL with a LIMIT, which stale statistics
    /// cannot turn into a join over `records`: the pool's sessions have no planner switches).
    static func readableAttachments(_ digests: [String], by caller: Caller, db: PostgresConnection, logger: Logger) async throws -> Set<String> {
        let query: PostgresQuery =
            caller.isService
            ? """
            SELECT digest FROM attachment_uploads WHERE digest = ANY(\(digests)::text[])
            UNION SELECT digest FROM attachment_refs WHERE digest = ANY(\(digests)::text[])
            """
            : """
            SELECT digest FROM attachment_uploads WHERE user_id = \(caller.userID) AND digest = ANY(\(digests)::text[])
            UNION
            SELECT a.digest FROM attachment_refs a
            CROSS JOIN LATERAL (
                SELECT 1 FROM records r WHERE r.user_id = a.partition AND r.entity = a.entity AND r.entity_id = a.entity_id
                    AND (NOT r.deleted OR a.released_at IS NOT NULL)
                LIMIT 1
            ) live
            WHERE a.digest = ANY(\(digests)::text[])
                AND (a.partition = \(caller.userID)
                    OR a.partition IN (SELECT chr(1) || space_key::text FROM space_members WHERE user_id = \(caller.userID)))
            """
        var readable: Set<String> = []
        for try await digest in try await db.query(query, logger: logger).decode(String.self) { readable.insert(digest) }
        return readable
    }

    /// Forgets old uploads of unreferenced attachments and references released before `cutoff`
    /// (``SyncStorage/expireAttachmentUploads(before:)``).
    public func expireAttachmentUploads(before cutoff: Int64) async throws -> [AttachmentDigest] {
        try await withDatabase { [logger] db in
            try await Self.transaction(db, logger: logger) { db in try await Self.expire(before: cutoff, db: db, logger: logger) }
        }
    }

    private static func expire(before cutoff: Int64, db: PostgresConnection, logger: Logger) async throws -> [AttachmentDigest] {
        // The released references go first, by a statement of their own (a sibling CTE's
        // NOT EXISTS would still see them): the uploads they alone kept then go with them.
        var released: [String] = []
        for try await digest in try await db.query("DELETE FROM attachment_refs WHERE released_at < \(cutoff) RETURNING digest", logger: logger)
            .decode(String.self)
        {
            released.append(digest)
        }
        var candidates: Set<String> = []
        for try await digest in try await db.query(
            """
            WITH expired AS (
                DELETE FROM attachment_uploads u WHERE uploaded_at < \(cutoff)
                    AND NOT EXISTS (SELECT 1 FROM attachment_refs r WHERE r.digest = u.digest
                        AND (r.partition = u.user_id
                            OR r.partition IN (SELECT chr(1) || space_key::text FROM space_members m WHERE m.user_id = u.user_id)))
                RETURNING user_id, digest
            )
            SELECT DISTINCT e.digest FROM expired e
            WHERE NOT EXISTS (
                SELECT 1 FROM attachment_uploads u WHERE u.digest = e.digest
                    AND NOT EXISTS (SELECT 1 FROM expired x WHERE x.user_id = u.user_id AND x.digest = u.digest)
            )
                AND NOT EXISTS (SELECT 1 FROM attachment_refs r WHERE r.digest = e.digest)
            UNION
            SELECT d FROM unnest(\(released)::text[]) d
            WHERE NOT EXISTS (SELECT 1 FROM attachment_uploads u WHERE u.digest = d)
                AND NOT EXISTS (SELECT 1 FROM attachment_refs r WHERE r.digest = d)
            """,
            logger: logger
        ).decode(String.self) {
            candidates.insert(digest)
        }
        return candidates.compactMap(AttachmentDigest.init).sorted { $0.hex < $1.hex }
    }

    /// Every attachment the database knows (``SyncStorage/storedAttachments()``).
    public func storedAttachments() async throws -> [StoredAttachment] {
        try await withDatabase { [logger] db in
            var uploads: [(digest: String, user: String, size: Int64, contentType: String?)] = []
            for try await upload in try await db.query(
                "SELECT digest, user_id, size, content_type FROM attachment_uploads",
                logger: logger
            ).decode((String, String, Int64, String?).self) {
                uploads.append(upload)
            }
            var references: [(digest: String, reference: StoredAttachment.Reference)] = []
            for try await (digest, space, partition, entity, entityID, released) in try await db.query(
                """
                SELECT a.digest, s.id, a.partition, a.entity, a.entity_id, a.released_at IS NOT NULL
                FROM attachment_refs a LEFT JOIN spaces s ON a.partition = chr(1) || s.key::text
                ORDER BY a.partition, a.entity, a.entity_id
                """,
                logger: logger
            ).decode((String, String?, String, String, String, Bool).self) {
                references.append(
                    (
                        digest,
                        StoredAttachment.Reference(
                            space: space,
                            user: space == nil ? partition : nil,
                            entity: entity,
                            entityID: entityID,
                            released: released
                        )
                    )
                )
            }
            return StoredAttachment.list(uploads: uploads, references: references)
        }
    }

    /// Whether anyone may read the attachment (``SyncStorage/wantsAttachment(_:)``), asked under
    /// the attachment's lock: a push referencing it (which holds the lock shared from before it
    /// reads whether the caller may) commits first and is seen, or starts after and finds no
    /// upload to reference (issue 50: unlocked, a push was written after its bytes were purged).
    public func wantsAttachment(_ digest: AttachmentDigest) async throws -> Bool {
        try await withDatabase { [logger] db in
            try await Self.transaction(db, logger: logger) { db in
                try await Self.lockAttachments([digest.description], exclusively: true, db: db, logger: logger)
                for try await wanted in try await db.query(
                    """
                    SELECT EXISTS (SELECT 1 FROM attachment_uploads WHERE digest = \(digest.description))
                        OR EXISTS (SELECT 1 FROM attachment_refs WHERE digest = \(digest.description))
                    """,
                    logger: logger
                ).decode(Bool.self) {
                    return wanted
                }
                return true
            }
        }
    }

    /// Takes the transaction's advisory lock on each of `digests`: shared by the pushes that
    /// reference them, exclusive for the purge's last question (``wantsAttachment(_:)``).
    static func lockAttachments(_ digests: [String], exclusively: Bool, db: PostgresConnection, logger: Logger) async throws {
        let digests = digests.sorted()
        let query: PostgresQuery =
            exclusively
            ? "SELECT pg_advisory_xact_lock(hashtextextended('ferry-attachment:' || d, 0)) FROM unnest(\(digests)::text[]) d ORDER BY d"
            : "SELECT pg_advisory_xact_lock_shared(hashtextextended('ferry-attachment:' || d, 0)) FROM unnest(\(digests)::text[]) d ORDER BY d"
        _ = try await db.query(query, logger: logger).collect()
    }

    /// What `userID`'s attachments take (``SyncStorage/attachmentUse(of:excluding:)``).
    public func attachmentUse(of userID: String, excluding: UploadID?) async throws -> AttachmentUse {
        try await withDatabase { [logger] db in
            let excluded = excluding?.value ?? ""
            for try await (kept, unfinished, unfinishedBytes) in try await db.query(
                """
                SELECT (SELECT coalesce(sum(size), 0)::int8 FROM attachment_uploads WHERE user_id = \(userID)),
                    count(*)::int8, coalesce(sum(greatest(held, coalesce(length, 0))), 0)::int8
                FROM open_uploads WHERE user_id = \(userID) AND upload_id != \(excluded)
                """,
                logger: logger
            ).decode((Int64, Int64, Int64).self) {
                return AttachmentUse(kept: kept, unfinished: Int(unfinished), unfinishedBytes: unfinishedBytes)
            }
            return AttachmentUse(kept: 0, unfinished: 0, unfinishedBytes: 0)
        }
    }

    /// The upload in progress `upload` (``SyncStorage/openUpload(_:)``).
    public func openUpload(_ upload: UploadID) async throws -> OpenUpload? {
        try await withDatabase { [logger] db in
            for try await (userID, digest, length, held, type) in try await db.query(
                "SELECT user_id, digest, length, held, content_type FROM open_uploads WHERE upload_id = \(upload.value)",
                logger: logger
            ).decode((String, String, Int64?, Int64, String?).self) {
                return AttachmentDigest(digest).map {
                    OpenUpload(upload: upload, userID: userID, digest: $0, length: length, held: held, contentType: type)
                }
            }
            return nil
        }
    }

    /// Notes an upload in progress (``SyncStorage/noteOpenUpload(_:within:)``). With a cap, one
    /// transaction takes the user's advisory lock, counts and notes: requests of several
    /// processes at once are counted one after the other.
    @discardableResult
    public func noteOpenUpload(_ upload: OpenUpload, within cap: Int?) async throws -> Bool {
        try await withDatabase { [logger] db in
            try await Self.transaction(db, logger: logger) { db in
                if let cap {
                    _ = try await db.query(
                        "SELECT pg_advisory_xact_lock(hashtextextended('ferry-open-uploads:' || \(upload.userID), 0))",
                        logger: logger
                    ).collect()
                    for try await others in try await db.query(
                        "SELECT count(*)::int8 FROM open_uploads WHERE user_id = \(upload.userID) AND upload_id != \(upload.upload.value)",
                        logger: logger
                    ).decode(Int64.self) where others >= cap {
                        return false
                    }
                }
                try await db.query(
                    """
                    INSERT INTO open_uploads (upload_id, user_id, digest, length, held, touched_at, content_type)
                    VALUES (\(upload.upload.value), \(upload.userID), \(upload.digest.description), \(upload.length), \(upload.held),
                        \(serverMilliseconds()), \(upload.contentType))
                    ON CONFLICT (upload_id) DO UPDATE SET length = excluded.length, held = excluded.held, touched_at = excluded.touched_at,
                        content_type = excluded.content_type
                    """,
                    logger: logger
                )
                return true
            }
        }
    }

    /// Forgets an upload in progress (``SyncStorage/closeUpload(_:)``).
    public func closeUpload(_ upload: UploadID) async throws {
        _ = try await withDatabase { [logger] db in
            try await db.query("DELETE FROM open_uploads WHERE upload_id = \(upload.value)", logger: logger)
        }
    }

    /// Forgets the uploads in progress untouched since `cutoff` (``SyncStorage/expireOpenUploads(before:)``).
    public func expireOpenUploads(before cutoff: Int64) async throws -> Int {
        try await withDatabase { [logger] db in
            var count = 0
            for try await _ in try await db.query("DELETE FROM open_uploads WHERE touched_at < \(cutoff) RETURNING 1", logger: logger)
                .decode(Int.self)
            {
                count += 1
            }
            return count
        }
    }
}
