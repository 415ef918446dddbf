import FerryProtocol

/// A mutation the server refused because the record changed since this client saw it.
public struct Conflict: Sendable, Equatable {
    /// The protocol's entity name of the record.
    public var entity: String
    /// The record's id.
    public var entityID: String
    /// The record as this client has it now: what the conflicting change wrote, or the newest
    /// change of the record queued after it (those are replaced by the resolution); `nil` for
    /// a delete.
    public var local: JSONObject?
    /// The record on the server; `nil` if it does not exist.
    public var server: RecordState?

    /// A conflict as the uploader hands it to a policy: for an app's tests of its own policy.
    public init(entity: String, entityID: String, local: JSONObject?, server: RecordState?) {
        self.entity = entity
        self.entityID = entityID
        self.local = local
        self.server = server
    }
}

/// How a conflict ends.
public enum ConflictResolution: Sendable, Equatable {
    /// The local row takes the server's state.
    case acceptServer
    /// This data (`nil`: delete) is written locally and sent again over the server's version.
    case keep(JSONObject?)
}

/// Decides every `conflict` the server reports. Conflicts are never retried blindly.
public struct ConflictPolicy: Sendable {
    /// Called once per conflict, inside the transaction that applies the server's answer: it must be quick and must not
    /// use the store's database.
    public let resolve: @Sendable (Conflict) -> ConflictResolution

    /// A policy that decides each conflict with `resolve`.
    public init(resolve: @escaping @Sendable (Conflict) -> ConflictResolution) {
        self.resolve = resolve
    }

    /// The default: the server's state wins and replaces the local row.
    public static let serverWins = ConflictPolicy { _ in .acceptServer }
    /// The local change wins: it is sent again over the server's version.
    public static let clientWins = ConflictPolicy { conflict in .keep(conflict.local) }
}
