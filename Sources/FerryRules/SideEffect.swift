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

    /// An effect of `kind` with its `payload`.
    public init(kind: String, payload: JSONObject = [:]) {
        self.kind = kind
        self.payload = payload
    }
}
