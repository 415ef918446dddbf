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
    /// The protocol's entity name; defaults to the table name.
    public var entity: String
    /// The column holding the record id (`entityID`), a TEXT primary key.
    public var primaryKey: String
    /// An optional column holding the record's natural key.
    public var naturalKey: String?
    public var layout: Layout
    /// Send each upsert with the version this client last saw (`baseVersion`), so a
    /// concurrent change elsewhere comes back as a conflict for the `ConflictPolicy`
    /// instead of being overwritten (last writer wins).
    public var detectsConflicts: Bool

    public init(
        table: String, entity: String? = nil, primaryKey: String = "id", naturalKey: String? = nil,
        layout: Layout = .columns, detectsConflicts: Bool = false
    ) {
        self.table = table
        self.entity = entity ?? table
        self.primaryKey = primaryKey
        self.naturalKey = naturalKey
        self.layout = layout
        self.detectsConflicts = detectsConflicts
    }
}
