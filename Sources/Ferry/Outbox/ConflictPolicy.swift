import FerryProtocol
import Foundation

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
    /// The record on the server; `nil` if it does not exist. A tombstone (`deleted`) says when
    /// the delete was made in its `changedAt`, like an edit.
    public var server: RecordState?
    /// When the local change (``local``) was made, by this device's clock; `nil` for a change
    /// queued by a Ferry older than the time it keeps.
    public var localChangedAt: Date?

    /// When the server's state was written: by the writing device's clock when it sent one
    /// (Ferry clients do), else by the server's; `nil` when the server does not know.
    public var serverChangedAt: Date? {
        server?.changedAt.map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }

    /// A conflict as the uploader hands it to a policy: for an app's tests of its own policy.
    public init(entity: String, entityID: String, local: JSONObject?, server: RecordState?, localChangedAt: Date? = nil) {
        self.entity = entity
        self.entityID = entityID
        self.local = local
        self.server = server
        self.localChangedAt = localChangedAt
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
    /// The latest change wins, an edit or a delete, by the clocks of the devices that made
    /// them: the local one when it is later than the server's, else the server's (also when
    /// either time is unknown). Clocks that are off by more than the time between two edits
    /// pick the wrong one; a policy that must not depend on clocks compares the data instead.
    public static let latestChangeWins = ConflictPolicy { conflict in
        guard let mine = conflict.localChangedAt, let theirs = conflict.serverChangedAt, mine > theirs else { return .acceptServer }
        return .keep(conflict.local)
    }
}
