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
    /// The app's own name for the effect, when the app has one (`team-7/j1`, the id of the
    /// request a webhook answers): an effect of `kind` asked again under the same key is kept
    /// once, whichever write asks: a store restored from a backup that sends a change again as
    /// a new client, another device or another user making the same change. The key spans every
    /// user and space (put the space in it when records of different spaces share ids), the
    /// first write's payload is the one kept, and it is forgotten with delivered effects after
    /// the server's `retention`, after which it may be asked again. 1 to 200 bytes, no control
    /// characters: a rule that gives another refuses its write with `rule_failed`. Without a
    /// key, each applied write's effects are its own.
    public var key: String?

    /// An effect of `kind` with its `payload`, named by the app's `key` if given.
    public init(kind: String, payload: JSONObject = [:], key: String? = nil) {
        self.kind = kind
        self.payload = payload
        self.key = key
    }
}
