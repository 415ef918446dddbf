/// The name of one detail of a `JournalEvent`: the journal's vocabulary, as `JournalEvent.Kind`
/// is for its kinds. Details are written and read by these names only, so a misspelt one does
/// not compile; the stored and exported form stays the name's string.
public struct JournalDetail: Hashable, Sendable, CustomStringConvertible {
    /// The name as the journal stores and exports it.
    public let name: String

    private init(_ name: String) { self.name = name }

    /// The name, as `description`.
    public var description: String { name }

    /// A request's attempt number.
    public static let attempt = JournalDetail("attempt")
    /// Bytes a request sent; an attachment's size.
    public static let bytes = JournalDetail("bytes")
    /// An attachment's digest.
    public static let digest = JournalDetail("digest")
    /// Conflicts a run met.
    public static let conflicts = JournalDetail("conflicts")
    /// How many changes an action touched.
    public static let count = JournalDetail("count")
    /// Changes set aside as dead letters.
    public static let deadLettered = JournalDetail("deadLettered")
    /// Progress: changes or records done.
    public static let done = JournalDetail("done")
    /// A record's entity.
    public static let entity = JournalDetail("entity")
    /// A record's id.
    public static let entityID = JournalDetail("entityID")
    /// Outbox entries a mutation stood for.
    public static let entries = JournalDetail("entries")
    /// What a trigger became (`TriggerFate`).
    public static let fate = JournalDetail("fate")
    /// A space role before it changed.
    public static let from = JournalDetail("from")
    /// Rows held aside.
    public static let held = JournalDetail("held")
    /// A mutation id.
    public static let id = JournalDetail("id")
    /// Records a from-scratch pull kept.
    public static let kept = JournalDetail("kept")
    /// A run's kind (`SyncKind`).
    public static let kind = JournalDetail("kind")
    /// Mutations merged into a record holding their natural key.
    public static let merged = JournalDetail("merged")
    /// A request's HTTP method.
    public static let method = JournalDetail("method")
    /// A request's duration in milliseconds.
    public static let ms = JournalDetail("ms")
    /// A new client id.
    public static let new = JournalDetail("new")
    /// A replaced client id.
    public static let old = JournalDetail("old")
    /// Whether the device was online (`true`, `false`).
    public static let online = JournalDetail("online")
    /// How a run ended: `succeeded`, `failed` or `cancelled`.
    public static let outcome = JournalDetail("outcome")
    /// A request's path.
    public static let path = JournalDetail("path")
    /// Records a run pulled.
    public static let pulled = JournalDetail("pulled")
    /// Changes a run pushed.
    public static let pushed = JournalDetail("pushed")
    /// Why, named (a cursor's refusal, an `IgnoredReason`).
    public static let reason = JournalDetail("reason")
    /// Bytes a request received.
    public static let received = JournalDetail("received")
    /// Changes left in the queue.
    public static let remaining = JournalDetail("remaining")
    /// Rows that left the store.
    public static let removed = JournalDetail("removed")
    /// Requests a run made.
    public static let requests = JournalDetail("requests")
    /// How a conflict ended: `server`, `local` or `merged`.
    public static let resolution = JournalDetail("resolution")
    /// A space role.
    public static let role = JournalDetail("role")
    /// A scheduler run's number.
    public static let run = JournalDetail("run")
    /// Runs a background sync made.
    public static let runs = JournalDetail("runs")
    /// How long a wait lasts.
    public static let seconds = JournalDetail("seconds")
    /// The server's version of a record in conflict.
    public static let serverVersion = JournalDetail("serverVersion")
    /// A space id.
    public static let space = JournalDetail("space")
    /// An HTTP status.
    public static let status = JournalDetail("status")
    /// Progress: changes to upload in all.
    public static let total = JournalDetail("total")
    /// A trigger's name (`SyncTrigger`).
    public static let trigger = JournalDetail("trigger")
    /// Why, in words.
    public static let why = JournalDetail("why")
    /// Whether a background sync left work (`true`, `false`).
    public static let workRemains = JournalDetail("workRemains")
}

extension JournalEvent {
    /// The detail named `detail`, if the event has it.
    public subscript(_ detail: JournalDetail) -> String? {
        get { details[detail.name] }
        set { details[detail.name] = newValue }
    }
}
