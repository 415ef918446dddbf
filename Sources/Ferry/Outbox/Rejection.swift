import FerryProtocol

/// A change the server refused, as the upload that sent it learned it
/// (``FerryClient/rejections()``): what an app shows in a banner or beside a form's field. The
/// change is kept as a dead letter with what it said (``FerryClient/deadLetters()``), to fix
/// and send again; the row shows the server's record again.
public struct Rejection: Sendable, Equatable {
    /// The record's entity (its table).
    public var entity: String
    /// The record's id.
    public var entityID: String
    /// The server's code: the app's rule's (`app.job_closed_without_photo`), or the protocol's
    /// (`forbidden`, `rule_failed`); `nil` when the server gave none.
    public var code: String?
    /// Why, in words for a person: the app's rule's message as the server gave it.
    public var message: String
    /// What the app's rule added for the app (the field at fault, a limit).
    public var details: JSONObject?

    /// A rejection from its fields.
    public init(entity: String, entityID: String, code: String?, message: String, details: JSONObject? = nil) {
        self.entity = entity
        self.entityID = entityID
        self.code = code
        self.message = message
        self.details = details
    }

    /// Whether the app's own rule refused the change (a code of `app.…`), not the protocol.
    public var isByAppRule: Bool { code?.hasPrefix("app.") == true }
}
