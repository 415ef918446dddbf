import FerryProtocol
import Foundation

/// Where the server keeps records, client positions and change order.
///
/// Handlers talk only to this protocol, so every storage engine (SQLite,
/// PostgreSQL) implements the same PROTOCOL.md rules and passes the same tests.
public protocol SyncStorage: Sendable {
    /// Applies one validated batch in a single transaction (PROTOCOL.md push rules 1 to 5). A
    /// mutation into a space the caller cannot write (judged by the memberships the transaction
    /// sees) is `rejected` with `forbidden` alone; a service caller writes to every space. The
    /// app's `rules` judge the new writes inside the same transaction; one that says "not now"
    /// (`RuleUnavailable`) is thrown, and nothing of the batch is applied.
    func push(caller: Caller, clientID: String, mutations: [IncomingMutation], rules: ServerRules) async throws -> PushResponse

    /// Hands out up to `limit` side effects the app's rules asked for (written by the pushes that
    /// applied their writes) that are due at `now` and held by no worker, each held until
    /// `now + lease` (milliseconds) and counted as one more attempt. With several processes on
    /// one database, each effect goes to one of them.
    func claimSideEffects(limit: Int, now: Int64, lease: Int64) async throws -> [DeliverableEffect]

    /// The effect of `key` was delivered: it is never handed out again.
    func sideEffectDelivered(_ key: String, at now: Int64) async throws

    /// The delivery of the effect of `key` failed: it is handed out again from `retryAt`.
    func sideEffectFailed(_ key: String, error: String, retryAt: Int64) async throws

    /// How many side effects wait for delivery.
    func pendingSideEffects() async throws -> Int

    /// Returns the user's records changed after `cursor`, oldest change first, leaving out those
    /// whose current state `ownWrites` names (PROTOCOL.md, "A client's own writes"), and, on a
    /// pull from scratch, tombstones. Throws `ProtocolViolation` with `invalid_cursor` for a
    /// cursor this server did not issue, and `cursor_expired` for one older than what was
    /// purged or read from a history this database does not have (`ChangeHead`).
    func pull(userID: String, cursor: String?, limit: Int, ownWrites: OwnWrites?) async throws -> PullPage

    /// Creates `space` with the caller its admin (a service caller: with no member); `created`
    /// is false when the caller already administers it. Throws `space_exists` for someone else's.
    func createSpace(_ space: String, by caller: Caller) async throws -> (membership: Membership, created: Bool)

    /// Deletes `space` and its records; every member loses access. Admins and services only.
    func deleteSpace(_ space: String, by caller: Caller) async throws

    /// The user's memberships, sorted by space id.
    func memberships(of userID: String) async throws -> [Membership]

    /// The members of `space`, sorted by user; for its members and services.
    func members(of space: String, by caller: Caller) async throws -> [SpaceMember]

    /// Adds `user` to `space` with `role`, or changes their role. Admins and services only.
    func setRole(_ role: SpaceRole, of user: String, in space: String, by caller: Caller) async throws -> SpaceMember

    /// Removes `user` from `space`: an admin's or service's request, or the member's own.
    func removeMember(_ user: String, from space: String, by caller: Caller) async throws

    /// Notes that `userID` uploaded the attachment `digest`, `size` bytes of `contentType`: they may read it.
    func noteUpload(of digest: AttachmentDigest, size: Int64, contentType: String?, by userID: String) async throws

    /// The media type an upload of the attachment said it holds; `nil` when none said.
    func contentType(of digest: AttachmentDigest) async throws -> String?

    /// Those of `digests` that `caller` may read: they uploaded it, or a live record of theirs or
    /// of a space they are a member of references it, or released it (replaced or deleted) since
    /// the janitor's last sweep a day before (a service may read all). Whether someone else holds
    /// the same bytes is never revealed.
    func readableAttachments(_ digests: [AttachmentDigest], by caller: Caller) async throws -> Set<AttachmentDigest>

    /// Forgets the references records released before `cutoff` (milliseconds since 1970), then the
    /// uploads made before it of attachments no record their uploader may read references (their
    /// access expires, and their quota no longer counts them, whoever else references the same
    /// bytes), and returns the attachments that nobody may read any more: the bytes to purge
    /// (`AttachmentJanitor`).
    func expireAttachmentUploads(before cutoff: Int64) async throws -> [AttachmentDigest]

    /// Whether anyone may read the attachment: an upload of it is noted, or a record references it.
    func wantsAttachment(_ digest: AttachmentDigest) async throws -> Bool

    /// Every attachment the database knows (an upload of it kept, or a record's reference), with
    /// its uploaders and references, by digest. It reads the two tables whole: for tests and an
    /// operator's look, not for a request's path.
    func storedAttachments() async throws -> [StoredAttachment]

    /// What `userID`'s attachments take (`--attachment-quota`): the bytes of those they uploaded
    /// that the server keeps, and their uploads in progress but `excluding` (the one a request works on).
    func attachmentUse(of userID: String, excluding: UploadID?) async throws -> AttachmentUse

    /// The upload in progress `upload`, as its last request left it; `nil` when none is noted.
    func openUpload(_ upload: UploadID) async throws -> OpenUpload?

    /// Notes an upload in progress, or what a request changed of it (it was touched now). With
    /// `cap`, a new upload is noted only if its user has fewer than `cap` others in progress,
    /// counted and noted in one step (two processes' requests at once cannot both pass it);
    /// returns whether it was noted.
    @discardableResult
    func noteOpenUpload(_ upload: OpenUpload, within cap: Int?) async throws -> Bool

    /// Forgets an upload in progress: completed, cancelled or discarded.
    func closeUpload(_ upload: UploadID) async throws

    /// Forgets the uploads in progress untouched since `cutoff` (milliseconds since 1970), as the
    /// store discards their bytes (`AttachmentJanitor`); returns how many.
    func expireOpenUploads(before cutoff: Int64) async throws -> Int

    /// Calls `deliver` with what each commit changed (a push's records, a membership), through
    /// any process on this database, until cancelled. Each commit is announced with it (on
    /// PostgreSQL in its transaction, so never without it; on SQLite once committed), and a
    /// commit of another SQLite process within half a second as `everything`. After a gap in which signals may have been lost (a
    /// lost connection, then the new one listening) it delivers `everything`.
    func followChanges(_ deliver: @escaping @Sendable ([ChangeSignal]) -> Void) async throws

    /// Forgets what the retention lets go: tombstones written before `cutoff` (milliseconds since
    /// 1970, the server's clock), with every user's purge horizon moved past them so older
    /// cursors expire, and clients that have not pushed since `cutoff` with their kept results.
    func purge(before cutoff: Int64) async throws -> PurgeReport

    /// Succeeds when the database can be reached.
    func checkHealth() async throws

    /// Closes the database; called once, after the HTTP server has stopped.
    func close() async throws
}

extension SyncStorage {
    /// Applies one validated batch with no rules of the app's: every write the protocol allows is stored.
    public func push(caller: Caller, clientID: String, mutations: [IncomingMutation]) async throws -> PushResponse {
        try await push(caller: caller, clientID: clientID, mutations: mutations, rules: ServerRules())
    }

    /// Notes that `userID` uploaded the attachment, of no media type said.
    public func noteUpload(of digest: AttachmentDigest, size: Int64, by userID: String) async throws {
        try await noteUpload(of: digest, size: size, contentType: nil, by: userID)
    }

    /// Notes an upload in progress, whatever the user's others (``noteOpenUpload(_:within:)``).
    public func noteOpenUpload(_ upload: OpenUpload) async throws {
        try await noteOpenUpload(upload, within: nil)
    }

    /// A user's push (not a service's).
    public func push(userID: String, clientID: String, mutations: [IncomingMutation]) async throws -> PushResponse {
        try await push(caller: Caller(userID: userID), clientID: clientID, mutations: mutations)
    }
}

/// What one purge forgot.
public struct PurgeReport: Sendable, Equatable {
    /// Tombstones deleted.
    public var tombstones = 0
    /// Users whose purge horizon moved (their older cursors now expire).
    public var users = 0
    /// Idle clients forgotten, with their kept results.
    public var clients = 0

    /// Nothing purged.
    public init(tombstones: Int = 0, users: Int = 0, clients: Int = 0) {
        self.tombstones = tombstones
        self.users = users
        self.clients = clients
    }
}

/// The server's clock, in milliseconds since 1970: when records and clients were last written.
func serverMilliseconds() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }

/// A server process's epoch (`ChangeHead`): random, never 0 (the epoch of histories written before epochs).
func newEpoch() -> Int64 { Int64.random(in: 1...Int64.max) }

/// Failures of the storage layer that a client should retry later.
public enum StorageError: Error, Sendable, CustomStringConvertible {
    /// The database cannot be reached, is busy beyond the timeout, or is shutting down.
    case unavailable(String)
    /// The database holds something this server cannot read.
    case corrupt(String)

    /// The failure and its reason, for the server's log; responses carry a generic message instead.
    public var description: String {
        switch self {
        case .unavailable(let why): "database unavailable: \(why)"
        case .corrupt(let why): "database content is not readable: \(why)"
        }
    }
}

/// A mutation as received, with its data encoded once and its validity decided.
public struct IncomingMutation: Sendable {
    /// The mutation as the client sent it.
    public let mutation: Mutation
    /// `data` encoded as stored; `nil` for deletes, and for an upsert whose data cannot be encoded
    /// (the planner rejects it).
    public let encodedData: Data?
    /// Why the mutation must be `rejected`; `nil` when it may be applied.
    public let rejection: String?

    /// Encodes `mutation`'s data once and decides whether it must be `rejected`.
    public init(_ mutation: Mutation) {
        self.init(mutation, attachments: true)
    }

    /// As `init(_:)`, on a server that keeps attachments or not. A server that
    /// keeps no attachments (`attachments` false) rejects a mutation naming any, for good: its
    /// record could never be read whole.
    public init(_ mutation: Mutation, attachments: Bool) {
        self.mutation = mutation
        let encoded = mutation.data.flatMap { try? ProtocolValidation.encode($0) }
        self.encodedData = encoded
        self.rejection =
            mutation.rejectionReason(encodedDataBytes: encoded?.count)
            ?? (attachments || (mutation.attachments ?? []).isEmpty
                ? nil : "this server keeps no attachments (ferry serve --attachments); a record referencing one cannot be stored here")
    }
}

/// The writes a pull leaves out: those of one client's mutations whose answers it applied,
/// named one by one (as ranges), so that the client holds their states. Never a ceiling: a
/// store copied to another device shares the client id, and the other copy's writes, whatever
/// their ids, must reach it.
public struct OwnWrites: Sendable, Equatable {
    /// Most ranges a pull may name; a client with more sends the first ones (more comes back, nothing is lost).
    public static let maxRanges = 1000

    /// The client asking.
    public var clientID: String
    /// The mutation ids whose answers it applied, ascending and apart.
    public var answered: [ClosedRange<Int64>]

    /// The writes of `clientID`'s mutations with ids in `answered`.
    public init(clientID: String, answered: [ClosedRange<Int64>]) {
        self.clientID = clientID
        self.answered = answered
    }

    /// Whether a pull leaves `record` out: its current state is one of these writes. A row
    /// whose `written_seq` is not its `seq` was moved by a server that did not record writers.
    func leavesOut(_ record: StoredRecord, at seq: Int64) -> Bool {
        guard let mutation = record.writtenMutation, record.writtenSeq == seq, let writer = record.writtenBy,
            writer.hasSameBytes(as: clientID)
        else { return false }
        var low = 0
        var high = answered.count - 1
        while low <= high {
            let middle = (low + high) / 2
            if answered[middle].contains(mutation) { return true }
            if answered[middle].upperBound < mutation { low = middle + 1 } else { high = middle - 1 }
        }
        return false
    }

    /// `answered`'s text, `3-5500,5502`: ranges ascending and apart, ids 1 to 2^53-1; `nil` and
    /// why when the text is not that.
    public static func ranges(_ text: String) -> Result<[ClosedRange<Int64>], ProtocolViolation> {
        var ranges: [ClosedRange<Int64>] = []
        let problem = ProtocolViolation.badRequest(
            "answered must be ascending mutation ids and ranges apart, like 3-5500,5502, each 1 to 2^53-1, "
                + "at most \(maxRanges) of them; got '\(text.prefix(40))'"
        )
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            // Digits only, no leading zero: the form openapi.yaml's pattern gives (no `+3`, no `007`).
            let bounds = part.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false).map { text in
                text.first != "0" && !text.isEmpty && text.utf8.allSatisfy { (48...57).contains($0) } ? Int64(text) : nil
            }
            guard bounds.count <= 2, let low = bounds.first ?? nil, let high = bounds.last ?? nil,
                low >= 1, low <= high, high <= ProtocolLimits.maxMutationID,
                ranges.last.map({ $0.upperBound < low }) ?? true, ranges.count < maxRanges
            else { return .failure(problem) }
            ranges.append(low...high)
        }
        return .success(ranges)
    }
}

/// A natural key within one user's entity; keys are equal when their bytes are, as in SQLite.
struct NaturalKeyRef: Hashable, Sendable {
    var entity: String
    var naturalKey: String

    static func == (a: Self, b: Self) -> Bool { a.entity.hasSameBytes(as: b.entity) && a.naturalKey.hasSameBytes(as: b.naturalKey) }

    func hash(into hasher: inout Hasher) {
        entity.hashBytes(into: &hasher)
        naturalKey.hashBytes(into: &hasher)
    }
}

/// One row of the records table.
struct StoredRecord: Sendable, Equatable {
    var entity: String
    var entityID: String
    var version: Int64
    var deleted: Bool
    var naturalKey: String?
    /// The record's data as encoded JSON; `nil` for a tombstone.
    var data: Data?
    /// When its last change was made (`RecordState.changedAt`); `nil` for rows older than the column.
    var changedAt: Int64? = nil
    /// The client whose mutation wrote this state, that mutation's id, and the position it was
    /// written at: a pull leaves the state out for that client once it was answered (``OwnWrites``).
    var writtenBy: String? = nil
    var writtenMutation: Int64? = nil
    var writtenSeq: Int64? = nil
    /// The id of the space the record lives in, on a pull page; `nil` for the personal space.
    var space: String? = nil

    var key: RecordRef { RecordRef(entity: entity, entityID: entityID) }

    /// The natural key this record holds for uniqueness purposes: only live records hold one.
    var liveNaturalKey: NaturalKeyRef? {
        guard !deleted, let naturalKey else { return nil }
        return NaturalKeyRef(entity: entity, naturalKey: naturalKey)
    }

    func state() throws -> RecordState {
        RecordState(
            version: version,
            deleted: deleted,
            data: try decodedData(),
            naturalKey: deleted ? nil : naturalKey,
            changedAt: changedAt
        )
    }

    private func decodedData() throws -> JSONObject? {
        guard let data else { return nil }
        do {
            return try JSONDecoder().decode(JSONObject.self, from: data)
        } catch {
            throw StorageError.corrupt("record \(entity)/\(entityID) has data that is not a JSON object")
        }
    }
}
