/// A record within one user's data, as both sides name it: its entity and its id. Ids are equal
/// when their bytes are, as in SQLite and PostgreSQL's `C` collation (`café` composed and
/// decomposed are two records).
package struct RecordRef: Hashable, Sendable {
    package var entity: String
    package var entityID: String

    package init(entity: String, entityID: String) {
        self.entity = entity
        self.entityID = entityID
    }

    package static func == (a: Self, b: Self) -> Bool { a.entity.hasSameBytes(as: b.entity) && a.entityID.hasSameBytes(as: b.entityID) }

    package func hash(into hasher: inout Hasher) {
        entity.hashBytes(into: &hasher)
        entityID.hashBytes(into: &hasher)
    }
}
