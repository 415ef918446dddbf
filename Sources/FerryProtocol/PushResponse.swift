/// What the server did with one mutation.
public enum MutationStatus: String, Sendable, Codable, Hashable, CaseIterable {
    /// Written as sent; the record has a new version.
    case applied
    /// Its natural key belongs to another record, which took the data: re-key to `entityID`.
    case merged
    /// Processed by an earlier push whose answer is no longer kept: nothing applied again; `current` is the record now.
    case duplicate
    /// The record changed since `baseVersion`; nothing written, `current` holds the server's state.
    case conflict
    /// Not storable (a rule of the protocol or the database); nothing written, `error` says why.
    case rejected
}

/// A record as the server holds it, reported with a `conflict`.
public struct RecordState: Sendable, Codable, Hashable {
    /// The record's current version.
    public var version: Int64
    /// Whether the record is a tombstone.
    public var deleted: Bool
    /// `nil` for a tombstone.
    public var data: JSONObject?
    /// The record's natural key, if it has one (a tombstone has none).
    public var naturalKey: String?
    /// When its last change (an edit or the delete) was made, in milliseconds since 1970: the
    /// writing device's clock when it sent `changedAt`, else the server's when it applied it;
    /// `nil` for a record last written before servers kept it.
    public var changedAt: Int64?

    /// What a rejection of a readable record carries when the server holds no such record:
    /// a tombstone at version 0 (the device removes its row, and forgets its version).
    public static let absent = RecordState(version: 0, deleted: true, data: nil)

    /// A record state from its fields.
    public init(version: Int64, deleted: Bool, data: JSONObject?, naturalKey: String? = nil, changedAt: Int64? = nil) {
        self.version = version
        self.deleted = deleted
        self.data = data
        self.naturalKey = naturalKey
        self.changedAt = changedAt
    }

    /// Encodes `data` as an explicit `null` for a tombstone, and leaves `naturalKey` out when there is none.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(deleted, forKey: .deleted)
        try container.encode(data, forKey: .data)  // explicit null for a tombstone
        try container.encodeIfPresent(naturalKey, forKey: .naturalKey)
        try container.encodeIfPresent(changedAt, forKey: .changedAt)
    }
}

/// One entry of a push response's `results`, in request order.
public struct PushResult: Sendable, Codable, Hashable {
    /// The id of the mutation this result answers.
    public var id: Int64
    /// What the server did with the mutation.
    public var status: MutationStatus
    /// The record's canonical identity; `nil` only for a `duplicate` whose record does not exist
    /// or a `rejected` mutation.
    public var entityID: String?
    /// The record's version after this mutation; `nil` for a delete of a record that never existed,
    /// and for a `duplicate`, which never claims a version it did not write.
    public var version: Int64?
    /// With `conflict` and `duplicate`: the server's record as it is now, `nil` if it does not exist.
    /// With `applied` or `merged` of a write the app's rule rewrote: the record as stored. With
    /// `rejected`: the record as the server holds it, when the client may read it.
    public var current: RecordState?
    /// Only with `rejected`: why.
    public var error: String?
    /// Only with `rejected`, when the reason is one a client acts on by itself:
    /// ``PushResult/mutationIDReused`` says the id was already used by this client id for another
    /// change, so another store holds this client id.
    public var code: String?
    /// Only with `rejected` by the app's rule (a `code` of `app.…`): what the app needs to show
    /// the refusal, as the rule gave it.
    public var details: JSONObject?

    /// The `code` of a mutation whose id this client id already used for another change: the
    /// store was copied to another device or restored from a backup.
    public static let mutationIDReused = "mutation_id_reused"
    /// The `code` a client gives a result whose status it does not know (a later server's): it
    /// keeps the change as a dead letter, since it cannot tell what the server did.
    public static let unrecognizedStatus = "unrecognized_status"

    /// A result from its fields.
    public init(
        id: Int64,
        status: MutationStatus,
        entityID: String?,
        version: Int64?,
        current: RecordState? = nil,
        error: String? = nil,
        code: String? = nil,
        details: JSONObject? = nil
    ) {
        self.id = id
        self.status = status
        self.entityID = entityID
        self.version = version
        self.current = current
        self.error = error
        self.code = code
        self.details = details
    }

    /// Encodes `entityID` and `version` always (`null` when absent), `current` only with `conflict` and `duplicate`,
    /// and `error` (and `code`, when there is one) only with `rejected`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(status, forKey: .status)
        try container.encode(entityID, forKey: .entityID)
        try container.encode(version, forKey: .version)
        if status == .conflict || status == .duplicate || current != nil { try container.encode(current, forKey: .current) }
        if status == .rejected {
            try container.encode(error, forKey: .error)
            try container.encodeIfPresent(code, forKey: .code)
            try container.encodeIfPresent(details, forKey: .details)
        }
    }
}

/// `POST /v1/push` response body.
public struct PushResponse: Sendable, Codable, Hashable {
    /// The highest mutation id the server has processed for this client.
    public var lastMutationID: Int64
    /// Exactly one result per mutation of the request, in request order.
    public var results: [PushResult]

    /// A response from its fields.
    public init(lastMutationID: Int64, results: [PushResult]) {
        self.lastMutationID = lastMutationID
        self.results = results
    }
}
