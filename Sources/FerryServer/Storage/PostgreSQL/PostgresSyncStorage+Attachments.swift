import FerryProtocol
import Foundation
import Logging
import PostgresNIO

/// Attachments on PostgreSQL: who uploaded what, and who may read what (PROTOCOL.md, "Attachments").
extension PostgresSyncStorage {
    /// Notes that `userID` uploaded the attachment (``SyncStorage/noteUpload(of:size:by:)``).
    public func noteUpload(of digest: AttachmentDigest, size: Int64, by userID: String) async throws {
        _ = try await withDatabase { [logger] db in
            try await db.query(
                """
                INSERT INTO attachment_uploads (user_id, digest, size, uploaded_at)
                VALUES (\(userID), \(digest.description), \(size), \(serverMilliseconds()))
                ON CONFLICT (user_id, digest) DO UPDATE SET size = excluded.size, uploaded_at = excluded.uploaded_at
                """,
                logger: logger
            )
        }
    }

    /// Those of `digests` that `caller` may read (``SyncStorage/readableAttachments(_:by:)``).
    public func readableAttachments(_ digests: [AttachmentDigest], by caller: Caller) async throws -> Set<AttachmentDigest> {
        try await withDatabase { [logger] db in
            Set(try await Self.readableAttachments(digests.map(\.description), by: caller, db: db, logger: logger).compactMap(AttachmentDigest.init))
        }
    }

    /// Those of `digests` that `caller` may read: uploaded by them, or referenced by a live record
    /// of theirs or of a space they are a member of. A service may read every attachment the
    /// server knows. Each reference probes `records` by its primary key (a LATERAL with a LIMIT, which stale
    /// statistics cannot turn into a join over `records`: the pool's sessions have no planner switches).
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
                SELECT 1 FROM records r WHERE r.user_id = a.partition AND r.entity = a.entity AND r.entity_id = a.entity_id AND NOT r.deleted
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

    /// Forgets old uploads of unreferenced attachments (``SyncStorage/expireAttachmentUploads(before:)``).
    public func expireAttachmentUploads(before cutoff: Int64) async throws -> [AttachmentDigest] {
        try await withDatabase { [logger] db in
            var digests: [AttachmentDigest] = []
            for try await digest in try await db.query(
                """
                WITH expired AS (
                    DELETE FROM attachment_uploads u WHERE uploaded_at < \(cutoff)
                        AND NOT EXISTS (SELECT 1 FROM attachment_refs r WHERE r.digest = u.digest)
                    RETURNING user_id, digest
                )
                SELECT DISTINCT e.digest FROM expired e
                WHERE NOT EXISTS (
                    SELECT 1 FROM attachment_uploads u WHERE u.digest = e.digest
                        AND NOT EXISTS (SELECT 1 FROM expired x WHERE x.user_id = u.user_id AND x.digest = u.digest)
                )
                ORDER BY e.digest
                """,
                logger: logger
            ).decode(String.self) {
                if let parsed = AttachmentDigest(digest) { digests.append(parsed) }
            }
            return digests
        }
    }

    /// Whether anyone may read the attachment (``SyncStorage/wantsAttachment(_:)``).
    public func wantsAttachment(_ digest: AttachmentDigest) async throws -> Bool {
        try await withDatabase { [logger] db in
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

    /// The bytes `userID`'s uploads hold (``SyncStorage/attachmentBytes(of:)``).
    public func attachmentBytes(of userID: String) async throws -> Int64 {
        try await withDatabase { [logger] db in
            for try await bytes in try await db.query(
                "SELECT coalesce(sum(size), 0)::bigint FROM attachment_uploads WHERE user_id = \(userID)",
                logger: logger
            ).decode(Int64.self) {
                return bytes
            }
            return 0
        }
    }
}
