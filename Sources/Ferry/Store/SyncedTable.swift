import FerryProtocol
import GRDB

/// An app table whose rows Ferry keeps in sync.
///
/// Every insert, update and delete on the table is captured into the outbox
/// by SQLite triggers, in the same transaction as the write.
public struct SyncedTable: Sendable, Hashable {
    /// How a row maps to a mutation's `data` object.
    public enum Layout: Sendable, Hashable {
        /// `data` is an object of the row's columns (all but the primary key and natural key).
        case columns
        /// `data` is stored whole, as JSON text, in one column.
        case document(column: String)
    }

    /// The SQLite table.
    public var table: String
    /// The protocol's entity name; defaults to the table name. Unused with `entityColumn`.
    public var entity: String
    /// For a table that holds records of many entities: the column naming each row's entity.
    /// Its key is then (entity, primary key), and it receives pulled records of every entity
    /// that has no table of its own.
    public var entityColumn: String?
    /// The column holding the record id (`entityID`), a TEXT primary key.
    public var primaryKey: String
    /// An optional column holding the record's natural key.
    public var naturalKey: String?
    /// How a row maps to a mutation's `data`; `columns` by default.
    public var layout: Layout
    /// Send each upsert with the version this client last saw (`baseVersion`), so a
    /// concurrent change elsewhere comes back as a conflict for the ``ConflictPolicy``
    /// instead of being overwritten (last writer wins).
    public var detectsConflicts: Bool
    /// Columns whose field in a record's `data` has another name, column to field: after an app
    /// renames a column (`value` to `amount`) it maps the new column to the old field
    /// (`["amount": "value"]`), so devices on the old and the new version read and write the
    /// same field. Fields that a device's columns do not hold are kept beside its row and sent
    /// back with its next change, so no version of the app erases what it does not know.
    public var fieldNames: [String: String] = [:]
    /// Which space the table's rows live in (PROTOCOL.md, "Spaces"): the user's personal space
    /// by default, one named space, or the space a column of each row names.
    public var space: Space = .personal

    /// The TEXT columns that hold an attachment's digest (`sha256:` and 64 hex digits) or NULL
    /// (PROTOCOL.md, "Attachments"): write the digest ``FerryStore/attach(fileAt:contentType:priority:space:)``
    /// returns. A change of the row goes to the server only after its attachments, and the
    /// column refuses anything that is not a digest. In the `.document` layout, fields of the
    /// document instead.
    public var attachments: [String] = []
    /// When this table's attachments come to the device: `.lazy` (the default) when the app
    /// asks for one (``FerryClient/attachment(_:)``), `.eager` after each pull.
    public var attachmentDownloads: AttachmentDownloads = .lazy

    /// When a table's attachments are downloaded.
    public enum AttachmentDownloads: Sendable, Hashable {
        /// When the app asks for one: a photo opened, not every photo of every job.
        case lazy
        /// After each pull, in the background of the run: the records are in the store first.
        case eager
    }

    /// Where a synced table's rows live.
    public enum Space: Sendable, Hashable {
        /// The signed-in user's own records.
        case personal
        /// Every row in one space, like a company's read-only reference data.
        case named(String)
        /// Each row in the space its column names (a team's `projects` with a `team_id`); NULL
        /// is the personal space. Pulled records are written with the column set; a row's
        /// space cannot change (delete it and insert it in the other space).
        case column(String)
    }

    /// A table with its own entity; `entity` defaults to the table's name. Nothing is checked here: opening a
    /// ``FerryStore`` throws ``FerryError/invalidTable(_:)`` for a table that does not fit.
    public init(
        table: String,
        entity: String? = nil,
        primaryKey: String = "id",
        naturalKey: String? = nil,
        layout: Layout = .columns,
        detectsConflicts: Bool = false,
        fieldNames: [String: String] = [:],
        space: Space = .personal,
        attachments: [String] = [],
        attachmentDownloads: AttachmentDownloads = .lazy
    ) {
        self.attachments = attachments
        self.attachmentDownloads = attachmentDownloads
        self.fieldNames = fieldNames
        self.space = space
        self.table = table
        self.entity = entity ?? table
        self.primaryKey = primaryKey
        self.naturalKey = naturalKey
        self.layout = layout
        self.detectsConflicts = detectsConflicts
    }

    /// A table holding records of any entity, keyed by (`entityColumn`, `primaryKey`).
    public static func multiEntity(
        table: String,
        entityColumn: String = "entity",
        primaryKey: String = "id",
        naturalKey: String? = nil,
        layout: Layout = .columns,
        space: Space = .personal
    ) -> SyncedTable {
        var synced = SyncedTable(table: table, primaryKey: primaryKey, naturalKey: naturalKey, layout: layout, space: space)
        synced.entityColumn = entityColumn
        return synced
    }

    /// The digests a change's data (the outbox entry's JSON text) references, in its attachment
    /// columns' fields; `nil` for a table without attachments, whose mutations say nothing.
    func referencedDigests(inData text: String?) -> [String]? {
        guard !attachments.isEmpty else { return nil }
        guard let text, case .object(let data)? = try? JSONReader.parse(text.utf8) else { return [] }
        return attachments.compactMap { column in
            if case .string(let digest)? = data[field(ofColumn: column)] { digest } else { nil }
        }
    }

    /// SQL reading the attachment `name` of a row (of `row`, an alias, when given): its column,
    /// or in the `.document` layout its field of the document.
    func attachmentSQL(_ name: String, row: String? = nil) -> String {
        let prefix = row.map { "\($0)." } ?? ""
        switch layout {
        case .columns: return prefix + name.quotedDatabaseIdentifier
        case .document(let column): return "json_extract(\(prefix)\(column.quotedDatabaseIdentifier), \(("$.\"" + name + "\"").sqlLiteral))"
        }
    }

    /// The digests this table's rows hold in their attachment columns, text only (a pulled record
    /// may hold anything there); with `unknownToStore`, only those `AttachmentTable` has no row of.
    func heldDigests(unknownToStore: Bool = false, db: Database) throws -> Set<String> {
        var digests: Set<String> = []
        for column in attachments {
            let value = attachmentSQL(column)
            let unknown = unknownToStore ? " AND \(value) NOT IN (\(AttachmentTable.knownDigestsSQL))" : ""
            digests.formUnion(
                try String.fetchAll(
                    db,
                    sql: "SELECT DISTINCT \(value) FROM \(table.quotedDatabaseIdentifier) WHERE typeof(\(value)) = 'text'\(unknown)"
                )
            )
        }
        return digests
    }

    /// The column naming each row's space, if any.
    var spaceColumn: String? {
        if case .column(let column) = space { column } else { nil }
    }

    /// Whether the table holds records of `space` (`nil`: the personal space).
    func holds(space: String?) -> Bool {
        switch self.space {
        case .personal: space == nil
        case .named(let named): space == named
        case .column: true
        }
    }

    /// Columns that are not fields of a record's `data`.
    var reservedColumns: [String] { [primaryKey, naturalKey, entityColumn, spaceColumn].compactMap { $0 } }

    /// The field of `data` that `column` holds.
    func field(ofColumn column: String) -> String {
        fieldNames[column] ?? column
    }

    /// SQL matching one record's row, with its arguments: `pk = ?`, plus the entity column when there is one.
    func rowCondition(entity: String, entityID: String) -> (sql: String, arguments: [String]) {
        let pk = "\(primaryKey.quotedDatabaseIdentifier) = ?"
        guard let entityColumn else { return (pk, [entityID]) }
        return ("\(entityColumn.quotedDatabaseIdentifier) = ? AND \(pk)", [entity, entityID])
    }
}
