import FerryProtocol

/// Something the app does outside the database when a write is applied (an email, a webhook,
/// a job in another system), asked for by a rule (``WriteRule/effects(of:)``). It is written to
/// the server's outbox in the same transaction as the write, and delivered after the commit,
/// with retries, by the app's handler, which gets a key that names it for good: a write applied
/// once asks for its effects once, whatever is resent, lost or restarted.
public struct SideEffect: Sendable, Equatable {
    /// What to do, as the app's handler knows it: `email.job_done`.
    public var kind: String
    /// What the handler needs to do it.
    public var payload: JSONObject
    /// The app's own name for the effect, when the app has one (`job-done/j1`, the id of the
    /// request a webhook answers): an effect of `kind` asked again under the same key is kept
    /// once, whichever write asks: a store restored from a backup that sends a change again as
    /// a new client, another device or another user making the same change. Without it, each
    /// applied write's effects are its own. Kept as long as the server keeps its clients'
    /// results (`retention`), after which the key may be asked again.
    public var key: String?

    /// An effect of `kind` with its `payload`, named by the app's `key` if given.
    public init(kind: String, payload: JSONObject = [:], key: String? = nil) {
        self.kind = kind
        self.payload = payload
        self.key = key
    }
}
