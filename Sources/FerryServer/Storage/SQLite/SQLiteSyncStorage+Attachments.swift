import FerryProtocol
import Foundation
import GRDB

/// Attachments on SQLite: who uploaded what (ATTACHMENTS.md).
extension SQLiteSyncStorage {
    /// Notes that `userID` uploaded the attachment (``SyncStorage/noteUpload(of:size:by:)``).
    public func noteUpload(of digest: AttachmentDigest, size: Int64, by userID: String) async throws {
        try await mapErrors {
            try await writer.write { db in
                try db.execute(
                    sql: "INSERT OR REPLACE INTO attachment_uploads (user_id, digest, size, uploaded_at) VALUES (?, ?, ?, ?)",
                    arguments: [userID, digest.description, size, serverMilliseconds()]
                )
            }
        }
    }

    /// The attachment's size if `caller` may read it (``SyncStorage/readableAttachment(_:by:)``).
    public func readableAttachment(_ digest: AttachmentDigest, by caller: Caller) async throws -> Int64? {
        try await mapErrors {
            try await writer.read { db in
                try Int64.fetchOne(
                    db,
                    sql: "SELECT size FROM attachment_uploads WHERE user_id = ? AND digest = ?",
                    arguments: [caller.userID, digest.description]
                )
            }
        }
    }
}
