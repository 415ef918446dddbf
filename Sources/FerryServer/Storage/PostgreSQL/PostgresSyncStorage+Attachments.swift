import FerryProtocol
import Foundation
import PostgresNIO

/// Attachments on PostgreSQL: who uploaded what (ATTACHMENTS.md).
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

    /// The attachment's size if `caller` may read it (``SyncStorage/readableAttachment(_:by:)``).
    public func readableAttachment(_ digest: AttachmentDigest, by caller: Caller) async throws -> Int64? {
        try await withDatabase { [logger] db in
            for try await size in try await db.query(
                "SELECT size FROM attachment_uploads WHERE user_id = \(caller.userID) AND digest = \(digest.description)",
                logger: logger
            ).decode(Int64.self) {
                return size
            }
            return nil
        }
    }
}
