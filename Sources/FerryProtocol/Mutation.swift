/// What a mutation does to its record.
public enum MutationOp: String, Sendable, Codable, Hashable, CaseIterable {
    /// Create the record, or replace its data.
    case upsert
    /// Delete the record (a tombstone other devices pull).
    case delete
}

/// One change a client uploads in a push.
public struct Mutation: Sendable, Codable, Hashable {
    /// Strictly increasing per `(user, clientID)`; 1 to 2^53-1.
    public var id: Int64
    /// The record's type, like a table name: `^[a-z][a-z0-9_]{0,63}$`.
    public var entity: String
    /// The record's id within `entity`: 1 to 128 printable characters (Unicode code points).
    public var entityID: String
    /// Whether the mutation writes the record's data or deletes the record.
    public var op: MutationOp
    /// Required for `upsert`, absent for `delete`.
    public var data: JSONObject?
    /// Only on `upsert`: a key that identifies the record independently of `entityID`.
    public var naturalKey: String?
    /// Apply only if the record's version equals this (0: only if it does not exist); otherwise `conflict`.
    public var baseVersion: Int64?
    /// When the device made the change, in milliseconds since 1970 by its own clock; the
    /// server keeps it with the record and reports it in a conflict, so a policy can let the
    /// latest change win, an edit or a delete. Optional: the server's clock stands in.
    public var changedAt: Int64?
    /// The space the record lives in (PROTOCOL.md, "Spaces"); `nil` for the user's personal space.
    public var space: String?
    /// Which space of that id the change was made in: the `incarnation` of the membership the
    /// device knew when it made it. A space deleted and created again under the same id is
    /// another space: a mutation naming an incarnation that is not the space's current one is
    /// `rejected` with `space_deleted`. Optional: without it the space's current one is meant.
    public var spaceIncarnation: String?
    /// Only on `upsert`: the attachments the record references once written, by digest
    /// (PROTOCOL.md, "Attachments"). The server keeps them with the record; each must be one the
    /// caller may read, else the mutation is `rejected` with `attachment_missing`. Absent: the
    /// record's references stay as they were (a client without attachments).
    public var attachments: [String]?

    /// A mutation from its fields, unchecked: `upsert` and `delete` build the shapes PROTOCOL.md allows.
    public init(
        id: Int64,
        entity: String,
        entityID: String,
        op: MutationOp,
        data: JSONObject? = nil,
        naturalKey: String? = nil,
        baseVersion: Int64? = nil,
        changedAt: Int64? = nil,
        space: String? = nil,
        spaceIncarnation: String? = nil,
        attachments: [String]? = nil
    ) {
        self.id = id
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.data = data
        self.naturalKey = naturalKey
        self.baseVersion = baseVersion
        self.changedAt = changedAt
        self.space = space
        self.spaceIncarnation = spaceIncarnation
        self.attachments = attachments
    }

    /// A mutation that creates the record or replaces its data, optionally matched by `naturalKey` and guarded by
    /// `baseVersion`.
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

    /// A mutation that deletes the record, leaving a tombstone on the server.
    public static func delete(id: Int64, entity: String, entityID: String) -> Mutation {
        Mutation(id: id, entity: entity, entityID: entityID, op: .delete)
    }
}
