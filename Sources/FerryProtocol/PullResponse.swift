/// A record's latest state, as delivered by a pull.
public struct Change: Sendable, Codable, Hashable {
    /// The record's type.
    public var entity: String
    /// The record's id within `entity`.
    public var entityID: String
    /// `delete` for a tombstone.
    public var op: MutationOp
    /// The record's version at the time of the pull.
    public var version: Int64
    /// The record's natural key, if it has one; a tombstone has none.
    public var naturalKey: String?
    /// Present for `upsert`, absent for `delete`.
    public var data: JSONObject?
    /// The space the record lives in; `nil` for the user's personal space.
    public var space: String?

    /// A change from its fields.
    public init(
        entity: String,
        entityID: String,
        op: MutationOp,
        version: Int64,
        naturalKey: String? = nil,
        data: JSONObject? = nil,
        space: String? = nil
    ) {
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.version = version
        self.naturalKey = naturalKey
        self.data = data
        self.space = space
    }
}

/// `GET /v1/pull` response body.
public struct PullResponse: Sendable, Codable, Hashable {
    /// The records changed since the request's cursor, each once with its latest state, in the order they last changed.
    public var changes: [Change]
    /// Opaque; pass it to the next pull.
    public var cursor: String
    /// Pull again with `cursor` while this is true.
    public var hasMore: Bool
    /// The user's memberships as the page was read, sorted by space id; `nil` when they are the
    /// ones the request's cursor was read with (unchanged), and from a server without spaces.
    public var spaces: [Membership]?
    /// The spaces the request's cursor covered that the user can no longer read: drop their records.
    public var revoked: [String]

    /// A response from its fields.
    public init(changes: [Change], cursor: String, hasMore: Bool, spaces: [Membership]? = nil, revoked: [String] = []) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
        self.spaces = spaces
        self.revoked = revoked
    }

    /// Reads `spaces` and `revoked` as empty when absent (a server from before spaces).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        changes = try container.decode([Change].self, forKey: .changes)
        cursor = try container.decode(String.self, forKey: .cursor)
        hasMore = try container.decode(Bool.self, forKey: .hasMore)
        spaces = try container.decodeIfPresent([Membership].self, forKey: .spaces)
        revoked = try container.decodeIfPresent([String].self, forKey: .revoked) ?? []
    }
}

/// `GET /v1/health` response body.
public struct HealthResponse: Sendable, Codable, Hashable {
    /// `ok`: the server can reach its database (otherwise it answers 503 with an error envelope).
    public var status: String
    /// A health response with `status`.
    public init(status: String) { self.status = status }
}
