import Foundation
import GRDB

#if canImport(CryptoKit)
import CryptoKit
#else
import Crypto
#endif

/// Where a user's store lives in a directory of stores.
///
/// The file is named from a SHA-256 of the user id, not the id itself: ids that differ only
/// in case ("Bob", "bob") would share one file on a case-insensitive file system (macOS and
/// iOS by default), and one user's changes would go up with the other's token; an id may
/// also hold characters or a length a file name cannot.
public enum StoreLocation {
    /// The store's file name for `userID`.
    public static func fileName(forUser userID: String) -> String {
        let digest = SHA256.hash(data: Data(userID.utf8))
        return "user-" + digest.map { String(format: "%02x", $0) }.joined() + ".sqlite"
    }

    /// The store's path for `userID` in `directory`. A store kept under the name earlier
    /// versions gave it (the id, percent-encoded) is moved to the new name first, unless
    /// another process has it open (then it is used where it is, and moved another time).
    /// Where two ids shared that old file, the first to sign in keeps it and the other starts afresh.
    public static func path(forUser userID: String, in directory: URL) throws -> URL {
        let path = directory.appendingPathComponent(fileName(forUser: userID))
        let legacy = legacyPath(forUser: userID, in: directory)
        let files = FileManager.default
        guard !files.fileExists(atPath: path.path), files.fileExists(atPath: legacy.path) else { return path }
        // Fold the write-ahead log into the file, so the file alone holds the store: SQLite does
        // so, and deletes the log, when the last connection closes. If the log is still there,
        // another process has the store open, and it stays where it is for now: moving it would
        // leave that process writing to a log nobody reads.
        let queue = try DatabaseQueue(path: legacy.path)
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try queue.close()
        guard !files.fileExists(atPath: legacy.path + "-wal") else { return legacy }
        do {
            try files.moveItem(at: legacy, to: path)
        } catch  where files.fileExists(atPath: path.path) {
            return path  // another process moved it first
        }
        for suffix in ["-wal", "-shm"] where files.fileExists(atPath: legacy.path + suffix) {
            try files.removeItem(atPath: legacy.path + suffix)
        }
        return path
    }

    /// Where `userID`'s store is in `directory` now, under its name or the one earlier versions
    /// gave it, without moving anything; `nil` if there is none.
    public static func existingPath(forUser userID: String, in directory: URL) -> URL? {
        [directory.appendingPathComponent(fileName(forUser: userID)), legacyPath(forUser: userID, in: directory)]
            .first { FileManager.default.fileExists(atPath: $0.path) }
    }

    private static func legacyPath(forUser userID: String, in directory: URL) -> URL {
        directory.appendingPathComponent((userID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? userID) + ".sqlite")
    }
}
