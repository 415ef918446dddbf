/// A record within one user's data (or one space's), as both sides name it: its entity and its
/// id. Ids are equal when their bytes are, as in SQLite and PostgreSQL's `C` collation (`café`
/// composed and decomposed are two records).
public struct RecordRef: Hashable, Sendable {
    /// The record's entity (its table).
    public var entity: String
    /// The record's id.
    public var entityID: String

    /// The record `entityID` of `entity`.
    public init(entity: String, entityID: String) {
        self.entity = entity
        self.entityID = entityID
    }

    /// Equal when both names have the same bytes.
    public static func == (a: Self, b: Self) -> Bool { a.entity.hasSameBytes(as: b.entity) && a.entityID.hasSameBytes(as: b.entityID) }

    /// Hashes the names' bytes, as equality compares them.
    public func hash(into hasher: inout Hasher) {
        entity.hashBytes(into: &hasher)
        entityID.hashBytes(into: &hasher)
    }
}
