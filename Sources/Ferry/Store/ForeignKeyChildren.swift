import Foundation
import GRDB

/// The app's columns that reference a synced table's key through a foreign key: a row that
/// takes another id (a natural-key merge) takes its children with it.
struct ForeignKeyChildren {
    /// One referencing column.
    struct Reference {
        var table: String
        var column: String
        /// The parent's column it references; empty for the parent's primary key.
        var parentColumn = ""
    }

    /// By parent table and referenced column (empty: the parent's primary key), lowercased;
    /// read on first use.
    private var references: [String: [Reference]]?

    /// The columns that reference `table`'s `key` column, by name or as its primary key.
    mutating func referencing(_ table: String, key: String, db: Database) throws -> [Reference] {
        if references == nil {
            var found: [String: [Reference]] = [:]
            let tables = try String.fetchAll(
                db,
                sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            )
            for child in tables {
                for row in try Row.fetchAll(db, sql: "SELECT \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?)", arguments: [child]) {
                    let parent = (row[0] as String).lowercased()
                    let column = ((row[2] as String?) ?? "").lowercased()
                    found["\(parent)\u{1}\(column)", default: []].append(Reference(table: child, column: row[1], parentColumn: column))
                }
            }
            references = found
        }
        let parent = table.lowercased()
        return (references?["\(parent)\u{1}\(key.lowercased())"] ?? []) + (references?["\(parent)\u{1}"] ?? [])
    }

    /// One foreign key of a table, whole: its columns and the parent's they reference, in
    /// order (a composite key is one key, not one reference per column).
    struct Key {
        var table: String
        var columns: [String]
        /// The parent's columns; empty for the parent's primary key.
        var parentColumns: [String]
    }

    /// Every foreign key of any table that references `table`.
    func keys(referencing table: String, db: Database) throws -> [Key] {
        var keys: [Key] = []
        let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
        for child in tables {
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT id, \"from\", \"to\" FROM pragma_foreign_key_list(?) WHERE lower(\"table\") = lower(?) ORDER BY id, seq",
                arguments: [child, table]
            )
            for group in Dictionary(grouping: rows, by: { $0[0] as Int64 }).sorted(by: { $0.key < $1.key }).map(\.value) {
                let parents = group.compactMap { $0[2] as String? }
                keys.append(Key(table: child, columns: group.map { $0[1] }, parentColumns: parents.count == group.count ? parents : []))
            }
        }
        return keys
    }
}

extension ForeignKeyChildren {
    /// The rows that reference one parent row, found before the parent changes its id (an
    /// `ON UPDATE CASCADE` moves them with it, and they must still be uploaded).
    struct Moving {
        var references: [Reference] = []
        /// Per synced child table, the ids of its rows that reference the parent.
        var uploads: [(table: SyncedTable, ids: [String])] = []

        /// Points the referencing rows at `canonical`, and queues the synced ones for upload.
        func move(from local: String, to canonical: String, db: Database) throws {
            for reference in references {
                let column = reference.column.quotedDatabaseIdentifier
                try db.execute(
                    sql: "UPDATE \(reference.table.quotedDatabaseIdentifier) SET \(column) = ? WHERE \(column) = ?",
                    arguments: [canonical, local]
                )
            }
            for (table, ids) in uploads where !ids.isEmpty {
                let list = String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)
                try ChangeCapture.queueUpserts(
                    of: table,
                    where: "\(table.primaryKey.quotedDatabaseIdentifier) IN (SELECT value FROM json_each(?))",
                    arguments: [list],
                    in: db
                )
            }
        }

        /// Deletes the referencing rows, and queues the deletes of the synced ones: their parent is gone.
        func delete(referencing parentID: String, db: Database) throws {
            for (table, ids) in uploads {
                for id in ids { try OutboxTable.insert(entity: table.entity, entityID: id, op: .delete, data: nil, naturalKey: nil, db: db) }
            }
            for reference in references {
                try db.execute(
                    sql: "DELETE FROM \(reference.table.quotedDatabaseIdentifier) WHERE \(reference.column.quotedDatabaseIdentifier) = ?",
                    arguments: [parentID]
                )
            }
        }
    }
}

extension ForeignKeyChildren {
    /// The rows of the app's tables that reference `parentID` in `table`; foreign keys are then
    /// checked at commit, so the parent and its children may change ids one after the other.
    mutating func rows(referencing parentID: String, in table: SyncedTable, store: FerryStore, db: Database) throws -> Moving {
        let references = try referencing(table.table, key: table.primaryKey, db: db)
        guard !references.isEmpty else { return Moving() }
        try db.execute(sql: "PRAGMA defer_foreign_keys = ON")
        var moving = Moving(references: references)
        for reference in references {
            guard let child = store.tables.first(where: { $0.table.lowercased() == reference.table.lowercased() }) else { continue }
            let ids = try String.fetchAll(
                db,
                sql: """
                    SELECT \(child.primaryKey.quotedDatabaseIdentifier) FROM \(reference.table.quotedDatabaseIdentifier)
                    WHERE \(reference.column.quotedDatabaseIdentifier) = ?
                    """,
                arguments: [parentID]
            )
            moving.uploads.append((child, ids))
        }
        return moving
    }
}
