import FerryProtocol
import Foundation
import GRDB

/// The one home of `ferry_attachments`' SQL: what the store knows of each attachment it holds
/// or must upload. A row is waiting to upload (`upload`) from the moment the app attaches the
/// bytes until the server holds them, and holds its file (`stored`) until the cache evicts it;
/// neither a waiting one nor one a queued change or a dead letter references is evicted.
enum AttachmentTable {
    /// An attachment as the store knows it.
    struct Row: Sendable, Equatable {
        var digest: AttachmentDigest
        var size: Int64
        var waitsForUpload: Bool
        var stored: Bool
        var attempts: Int
        var error: String?
        /// When it was attached, downloaded or last read (seconds since 1970).
        var usedAt: Double
        /// Its media type, as attached or as the server answered it.
        var contentType: String?
    }

    static let createSQL = """
        CREATE TABLE ferry_attachments (
            digest TEXT PRIMARY KEY NOT NULL,
            size INTEGER NOT NULL,
            content_type TEXT,
            upload INTEGER NOT NULL,
            stored INTEGER NOT NULL,
            used_at REAL NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            error TEXT
        ) WITHOUT ROWID;
        """

    /// The app attached these bytes: they wait for upload (the server may have them already:
    /// the upload then asks, and sends nothing), before those of a lower `priority`.
    static func attached(_ digest: AttachmentDigest, size: Int64, contentType: String?, priority: AttachmentPriority, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO ferry_attachments (digest, size, content_type, upload, stored, used_at, priority) VALUES (?, ?, ?, 1, 1, \(nowSQL), ?)
                ON CONFLICT (digest) DO UPDATE SET upload = 1, stored = 1, error = NULL, used_at = excluded.used_at,
                    content_type = coalesce(excluded.content_type, content_type), priority = max(priority, excluded.priority)
                """,
            arguments: [digest.description, size, contentType, priority.rawValue]
        )
    }

    /// Adds `priority` to a store made before it.
    static let addPrioritySQL = "ALTER TABLE ferry_attachments ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"

    /// The whole attachment was downloaded into the folder, of the media type the server said.
    static func downloaded(_ digest: AttachmentDigest, size: Int64, contentType: String?, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO ferry_attachments (digest, size, upload, stored, used_at, content_type) VALUES (?, ?, 0, 1, \(nowSQL), ?)
                ON CONFLICT (digest) DO UPDATE SET stored = 1, used_at = excluded.used_at,
                    content_type = coalesce(content_type, excluded.content_type)
                """,
            arguments: [digest.description, size, contentType]
        )
    }

    /// What the store knows of one attachment; `nil` when nothing.
    static func row(_ digest: AttachmentDigest, db: Database) throws -> Row? {
        try fetch(where: "digest = ?", arguments: [digest.description], db: db).first
    }

    /// The server holds the attachment for this user now.
    static func uploaded(_ digest: AttachmentDigest, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_attachments SET upload = 0, attempts = 0, error = NULL WHERE digest = ?", arguments: [digest.description])
    }

    /// An upload failed with `error`; it is tried again on the next run.
    static func failed(_ digest: AttachmentDigest, error: String, db: Database) throws {
        try db.execute(
            sql: "UPDATE ferry_attachments SET attempts = attempts + 1, error = ? WHERE digest = ?",
            arguments: [error, digest.description]
        )
    }

    /// The server does not hold these for this user after all (`attachment_missing`): those
    /// whose file the store holds wait for upload again. Returns the digests it holds no file of.
    static func uploadAgain(_ digests: [String], db: Database) throws -> [String] {
        var missing: [String] = []
        for digest in digests {
            try db.execute(sql: "UPDATE ferry_attachments SET upload = 1 WHERE digest = ? AND stored = 1", arguments: [digest])
            if db.changesCount == 0 { missing.append(digest) }
        }
        return missing
    }

    /// The app read the attachment: it is the last to be evicted. Returns whether the store knew it.
    @discardableResult
    static func touch(_ digest: AttachmentDigest, db: Database) throws -> Bool {
        try db.execute(sql: "UPDATE ferry_attachments SET used_at = \(nowSQL) WHERE digest = ?", arguments: [digest.description])
        return db.changesCount > 0
    }

    /// The attachments waiting for upload, the highest priority first, then the oldest use.
    static func waiting(_ db: Database) throws -> [Row] {
        try fetch(where: "upload = 1", order: "priority DESC, used_at", db: db)
    }

    /// Every attachment the store knows, for the queue snapshot (none in a store older than
    /// attachments, which the CLI may read).
    static func all(_ db: Database) throws -> [Row] {
        guard try db.tableExists("ferry_attachments") else { return [] }
        return try fetch(where: "1", db: db)
    }

    /// The digests the store holds a row of, as a SQL query.
    static let knownDigestsSQL = "SELECT digest FROM ferry_attachments"

    /// How many attachments wait for upload that a queued change will send, and their bytes
    /// (``AttachmentProgress/uploadsWaiting``): not one whose change became a dead letter or was
    /// never written.
    static func waitingCount(_ db: Database) throws -> (count: Int, bytes: Int64) {
        let waiting = try waiting(db)
        guard !waiting.isEmpty else { return (0, 0) }
        let queued = try OutboxTable.attachmentDigests(includingDeadLetters: false, db: db)
        let sent = waiting.filter { queued.contains($0.digest.description) }
        return (sent.count, sent.reduce(0) { $0 + $1.size })
    }

    /// The digests waiting for upload: changes referencing one wait for it.
    static func blocked(_ db: Database) throws -> Set<String> {
        Set(try String.fetchAll(db.cachedStatement(sql: "SELECT digest FROM ferry_attachments WHERE upload = 1")))
    }

    /// The attachments to evict, least recently used first, so the ones held fit in `budget`
    /// bytes: only those the server has confirmed. Never one waiting for upload, nor one a queued
    /// change or a dead letter references: uploaded, but its record not yet accepted, the server
    /// forgets it a day later, and this file may be its last copy (issue 50).
    static func evictable(toFit budget: Int64, db: Database) throws -> [AttachmentDigest] {
        var total = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(size), 0) FROM ferry_attachments WHERE stored = 1") ?? 0
        var evict: [AttachmentDigest] = []
        guard total > budget else { return [] }
        let pinned = try OutboxTable.attachmentDigests(includingDeadLetters: true, db: db)
        for row in try fetch(where: "stored = 1 AND upload = 0", order: "used_at", db: db) where total > budget {
            if pinned.contains(row.digest.description) { continue }
            evict.append(row.digest)
            total -= row.size
        }
        return evict
    }

    /// The attachment's file left the folder.
    static func evicted(_ digests: [AttachmentDigest], db: Database) throws {
        for digest in digests {
            try db.execute(sql: "UPDATE ferry_attachments SET stored = 0 WHERE digest = ? AND upload = 0", arguments: [digest.description])
        }
    }

    /// Forgets the attachments in `digests` (their files are removed by the caller).
    static func forget(_ digests: [AttachmentDigest], db: Database) throws {
        for digest in digests {
            try db.execute(sql: "DELETE FROM ferry_attachments WHERE digest = ?", arguments: [digest.description])
        }
    }

    private static let nowSQL = "(julianday('now') - 2440587.5) * 86400.0"

    private static func fetch(where condition: String, arguments: StatementArguments = [], order: String = "used_at", db: Database) throws -> [Row] {
        try GRDB.Row.fetchAll(
            db,
            sql: """
                SELECT digest, size, upload, stored, attempts, error, used_at, content_type FROM ferry_attachments
                WHERE \(condition) ORDER BY \(order)
                """,
            arguments: arguments
        )
        .compactMap { row in
            AttachmentDigest(row[0] as String).map {
                Row(
                    digest: $0,
                    size: row[1],
                    waitsForUpload: row[2],
                    stored: row[3],
                    attempts: row[4],
                    error: row[5],
                    usedAt: row[6],
                    contentType: row[7]
                )
            }
        }
    }
}

/// Which attachments upload first (``FerryStore/attach(fileAt:contentType:priority:space:)``):
/// the highest priority, then the oldest.
public enum AttachmentPriority: Int, Sendable, Comparable {
    /// After every other: a backup's files.
    case low = -1
    /// In the order attached.
    case normal = 0
    /// Before every other: a signature, a photo a customer waits for.
    case high = 1

    /// Whether `lhs` uploads after `rhs`.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}
