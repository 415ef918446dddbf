/// What a mutation does to its record.
public enum MutationOp: String, Sendable, Codable, Hashable, CaseIterable {
    case upsert
    case delete
}

/// One change a client uploads in a push.
public struct Mutation: Sendable, Codable, Hashable {
    /// Strictly increasing per `(user, clientID)`; 1 to 2^53-1.
    public var id: Int64
    public var entity: String
    public var entityID: String
    public var op: MutationOp
    /// Required for `upsert`, absent for `delete`.
    public var data: JSONObject?
    /// Only on `upsert`: a key that identifies the record independently of `entityID`.
    public var naturalKey: String?
    /// Only on `upsert`: apply only if the record's version equals this (0: only if it does not exist).
    public var baseVersion: Int64?

    public init(
        id: Int64,
        entity: String,
        entityID: String,
        op: MutationOp,
        data: JSONObject? = nil,
        naturalKey: String? = nil,
        baseVersion: Int64? = nil
    ) {
        self.id = id
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.data = data
        self.naturalKey = naturalKey
        self.baseVersion = baseVersion
    }

    public static func upsert(
        id: Int64,
        entity: String,
        entityID: String,
        data: JSONObject,
        naturalKey: String? = nil,
        baseVersion: Int64? = nil
    ) -> Mutation {
        Mutation(id: id, entity: entity, entityID: entityID, op: .upsert, data: data, naturalKey: naturalKey, baseVersion: baseVersion)
    }

    public static func delete(id: Int64, entity: String, entityID: String) -> Mutation {
        Mutation(id: id, entity: entity, entityID: entityID, op: .delete)
    }
}
