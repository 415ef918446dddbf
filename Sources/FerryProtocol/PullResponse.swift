/// A record's latest state, as delivered by a pull.
public struct Change: Sendable, Codable, Hashable {
    public var entity: String
    public var entityID: String
    /// `delete` for a tombstone.
    public var op: MutationOp
    public var version: Int64
    public var naturalKey: String?
    /// Present for `upsert`, absent for `delete`.
    public var data: JSONObject?

    public init(entity: String, entityID: String, op: MutationOp, version: Int64, naturalKey: String? = nil, data: JSONObject? = nil) {
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.version = version
        self.naturalKey = naturalKey
        self.data = data
    }
}

/// `GET /v1/pull` response body.
public struct PullResponse: Sendable, Codable, Hashable {
    public var changes: [Change]
    /// Opaque; pass it to the next pull.
    public var cursor: String
    /// Pull again with `cursor` while this is true.
    public var hasMore: Bool

    public init(changes: [Change], cursor: String, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }
}

/// `GET /v1/health` response body.
public struct HealthResponse: Sendable, Codable, Hashable {
    public var status: String
    public init(status: String) { self.status = status }
}
