/// What the server did with one mutation.
public enum MutationStatus: String, Sendable, Codable, Hashable, CaseIterable {
    case applied
    case merged
    case duplicate
    case conflict
    case rejected
}

/// A record as the server holds it, reported with a `conflict`.
public struct RecordState: Sendable, Codable, Hashable {
    public var version: Int64
    public var deleted: Bool
    /// `nil` for a tombstone.
    public var data: JSONObject?
    /// The record's natural key, if it has one (a tombstone has none).
    public var naturalKey: String?

    public init(version: Int64, deleted: Bool, data: JSONObject?, naturalKey: String? = nil) {
        self.version = version
        self.deleted = deleted
        self.data = data
        self.naturalKey = naturalKey
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(deleted, forKey: .deleted)
        try container.encode(data, forKey: .data)  // explicit null for a tombstone
        try container.encodeIfPresent(naturalKey, forKey: .naturalKey)
    }
}

/// One entry of a push response's `results`, in request order.
public struct PushResult: Sendable, Codable, Hashable {
    public var id: Int64
    public var status: MutationStatus
    /// The record's canonical identity; `nil` only for a `duplicate` whose record does not exist
    /// or a `rejected` mutation.
    public var entityID: String?
    /// The record's version after this mutation; `nil` for a delete of a record that never existed,
    /// and for a `duplicate`, which never claims a version it did not write.
    public var version: Int64?
    /// With `conflict` and `duplicate`: the server's record as it is now, `nil` if it does not exist.
    public var current: RecordState?
    /// Only with `rejected`: why.
    public var error: String?

    public init(
        id: Int64,
        status: MutationStatus,
        entityID: String?,
        version: Int64?,
        current: RecordState? = nil,
        error: String? = nil
    ) {
        self.id = id
        self.status = status
        self.entityID = entityID
        self.version = version
        self.current = current
        self.error = error
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(status, forKey: .status)
        try container.encode(entityID, forKey: .entityID)
        try container.encode(version, forKey: .version)
        if status == .conflict || status == .duplicate { try container.encode(current, forKey: .current) }
        if status == .rejected { try container.encode(error, forKey: .error) }
    }
}

/// `POST /v1/push` response body.
public struct PushResponse: Sendable, Codable, Hashable {
    /// The highest mutation id the server has processed for this client.
    public var lastMutationID: Int64
    public var results: [PushResult]

    public init(lastMutationID: Int64, results: [PushResult]) {
        self.lastMutationID = lastMutationID
        self.results = results
    }
}
