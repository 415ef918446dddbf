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
    /// The record as this device had it before its change: what the local edit started from,
    /// so a policy can tell the fields this device changed from those the server's side did
    /// (``ConflictPolicy/fieldMerge(bothChanged:deletes:)``). `nil` for a new record, a delete, a
    /// table without `detectsConflicts`, or a change queued by a Ferry that did not keep it.
    public var base: JSONObject?

    /// When the server's state was written: by the writing device's clock when it sent one
    /// (Ferry clients do), else by the server's; `nil` when the server does not know.
    public var serverChangedAt: Date? {
        server?.changedAt.map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }

    /// A conflict as the uploader hands it to a policy: for an app's tests of its own policy.
    public init(
        entity: String,
        entityID: String,
        local: JSONObject?,
        server: RecordState?,
        localChangedAt: Date? = nil,
        base: JSONObject? = nil
    ) {
        self.entity = entity
        self.entityID = entityID
        self.local = local
        self.server = server
        self.localChangedAt = localChangedAt
        self.base = base
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

    /// Which side a field, or a whole record, goes to.
    public enum Side: Sendable, Equatable {
        /// This device's change.
        case local
        /// The server's state.
        case server
    }

    /// A three-way merge, field by field, from what the local edit started from
    /// (``Conflict/base``): a field only one side changed keeps that side's value (a
    /// dispatcher's reassignment survives a worker's edit of the notes); a field both changed,
    /// to different values, goes to the side `bothChanged` names for it. A delete on either side
    /// is a change of the whole record, decided by `deletes`. Without a base every field that
    /// differs counts as changed by both.
    public static func fieldMerge(
        bothChanged: @escaping @Sendable (_ field: String) -> Side = { _ in .server },
        deletes: Side = .server
    ) -> ConflictPolicy {
        ConflictPolicy { conflict in
            guard let local = conflict.local, let server = conflict.server, !server.deleted, let theirs = server.data else {
                return deletes == .local ? .keep(conflict.local) : .acceptServer
            }
            let merged = Self.merge(base: conflict.base, local: local, server: theirs, bothChanged: bothChanged)
            return merged == theirs ? .acceptServer : .keep(merged)
        }
    }

    /// The field-wise merge of `local` and `server` from `base` (`fieldMerge`).
    static func merge(
        base: JSONObject?,
        local: JSONObject,
        server: JSONObject,
        bothChanged: (String) -> Side
    ) -> JSONObject {
        var merged = server
        for field in Set(local.keys).union(server.keys) {
            let mine = local[field]
            let theirs = server[field]
            guard mine != theirs else { continue }
            let was = base?[field]
            let localChanged = base == nil || mine != was
            let serverChanged = base == nil || theirs != was
            let side: Side = localChanged && !serverChanged ? .local : (serverChanged && !localChanged ? .server : bothChanged(field))
            if side == .local { merged[field] = mine }
        }
        return merged
    }
}

/// A conflict and how the policy ended it, as the journal tells it.
struct ResolvedConflict: Sendable {
    var conflict: Conflict
    var resolution: ConflictResolution

    /// `server`, `local` (this device's change, or its delete), or `merged`.
    var outcome: String {
        switch resolution {
        case .acceptServer: "server"
        case .keep(let data): data == conflict.local ? "local" : "merged"
        }
    }
}
