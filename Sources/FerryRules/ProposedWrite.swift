import FerryProtocol

/// A write a client proposes, as a rule sees it.
public struct ProposedWrite: Sendable, Equatable {
    /// The record's entity (its table).
    public var entity: String
    /// The record's id.
    public var entityID: String
    /// Whether it writes (`upsert`) or deletes the record.
    public var op: MutationOp
    /// The record's new data; `nil` for a delete. When an earlier rule rewrote it, the rewrite.
    public var data: JSONObject?
    /// The record as the server holds it before the push; `nil` when it never existed
    /// (a deleted one is here with `deleted` true).
    public var current: RecordState?
    /// The space the write goes to; `nil` for the writer's own records.
    public var space: String?
    /// The writer's role in ``space``; `nil` outside spaces, and for a service.
    public var role: SpaceRole?
    /// Who writes: their token's `sub`.
    public var user: String
    /// Whether the token is a service token (the app's backend), which may write anywhere.
    public var isService: Bool
    /// The writing client and its mutation's id: together they name the write for good, for an
    /// idempotency key.
    public var clientID: String
    /// See ``clientID``.
    public var mutationID: Int64

    /// A proposed write from its fields.
    public init(
        entity: String,
        entityID: String,
        op: MutationOp,
        data: JSONObject?,
        current: RecordState? = nil,
        space: String? = nil,
        role: SpaceRole? = nil,
        user: String,
        isService: Bool = false,
        clientID: String,
        mutationID: Int64
    ) {
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.data = data
        self.current = current
        self.space = space
        self.role = role
        self.user = user
        self.isService = isService
        self.clientID = clientID
        self.mutationID = mutationID
    }

    /// The record this write is of.
    public var record: RecordRef { RecordRef(entity: entity, entityID: entityID) }
}

/// The records a rule asked to read (``WriteRule/reads(for:)``), as the server holds them.
public struct RuleReads: Sendable, Equatable {
    private let records: [RecordRef: RecordState]

    /// Reads from the records found; a record absent here never existed.
    public init(_ records: [RecordRef: RecordState] = [:]) {
        self.records = records
    }

    /// The record as the server holds it; `nil` when it never existed, or was not asked for.
    public subscript(_ record: RecordRef) -> RecordState? { records[record] }

    /// The record's data when it exists and is not deleted.
    public func data(of record: RecordRef) -> JSONObject? {
        guard let state = records[record], !state.deleted else { return nil }
        return state.data
    }
}
