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

/// `GET /v1/health` response body: whether the server can serve, and what it can do.
public struct HealthResponse: Sendable, Codable, Hashable {
    /// `ok`: the server can reach its database (otherwise it answers 503 with an error envelope).
    public var status: String
    /// The protocol versions the server speaks, lowest and highest; `nil` from a server from
    /// before versions (it speaks `1.0`).
    public var `protocol`: VersionRange?
    /// What the server offers, by name (``Feature``): a client detects a feature here rather
    /// than compares version numbers. Names it does not know it ignores.
    public var features: [String]?
    /// The least versions the server serves, when it requires any (`update_required`).
    public var minimum: UpdateRequirement?

    /// The lowest and highest protocol versions a server speaks, `"1.0"` and `"1.1"`.
    public struct VersionRange: Sendable, Codable, Hashable {
        /// The lowest version spoken.
        public var min: String
        /// The highest version spoken.
        public var max: String
        /// A range from its ends.
        public init(min: String, max: String) {
            self.min = min
            self.max = max
        }
    }

    /// The features a server names in `features`.
    public enum Feature {
        /// Spaces a team shares (`/v1/spaces`).
        public static let spaces = "spaces"
        /// The event stream (`/v1/events`).
        public static let live = "live"
        /// Attachments (`/v1/attachments`): absent when the server keeps none.
        public static let attachments = "attachments"
        /// `update_required` answers below a minimum version.
        public static let updateRequired = "update_required"
        /// The app's rules judge writes: a refusal carries the app's code (`app.…`) and `details`.
        public static let rules = "rules"
        /// A pull's `limit` may be up to 10,000 (``ProtocolLimits/pullLimitRange``); without it, up to 1,000.
        public static let largePages = "large_pages"
        /// `POST /v1/attachments` says which of many digests the server holds for the caller.
        public static let heldAttachments = "held_attachments"
    }

    /// A health response with `status` and what the server can do.
    public init(status: String, protocol: VersionRange? = nil, features: [String]? = nil, minimum: UpdateRequirement? = nil) {
        self.status = status
        self.protocol = `protocol`
        self.features = features
        self.minimum = minimum
    }
}
