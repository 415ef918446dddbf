import FerryProtocol

/// What a rule decides about a write.
public enum RuleDecision: Sendable, Equatable {
    /// The write goes on as proposed (to the next rule, then to the push's own rules).
    case accept
    /// The server stores this data instead (derived fields, normalised values); the client is
    /// answered `applied` with the stored record and takes it at once.
    case rewrite(JSONObject)
    /// The write is refused: the client is answered `rejected` with the app's code, the message
    /// and the details, takes the server's record back and keeps the change as a dead letter.
    case reject(RuleRejection)

    /// Refuses the write with the app's `code` (`a-z 0-9 _`, sent as `app.<code>`), a `message`
    /// for a person and optional `details` for the app.
    public static func reject(code: String, message: String, details: JSONObject? = nil) -> RuleDecision {
        .reject(RuleRejection(code: code, message: message, details: details))
    }
}

/// Why a rule refused a write, for the person who made it and for the app.
public struct RuleRejection: Sendable, Equatable {
    /// The app's code, without its namespace: `job_closed_without_photo`.
    public var code: String
    /// What to tell the person, in their words.
    public var message: String
    /// What the app needs to show the refusal (the field at fault, a limit).
    public var details: JSONObject?

    /// A rejection from its fields.
    public init(code: String, message: String, details: JSONObject? = nil) {
        self.code = code
        self.message = message
        self.details = details
    }

    /// The prefix of every code a rule gives: `app.job_closed_without_photo`.
    public static let namespace = "app."

    /// The code as the wire carries it, `app.<code>`; `nil` when `code` is not 1 to 64 of
    /// `a-z 0-9 _` starting with a letter.
    public var wireCode: String? {
        let bytes = Array(code.utf8)
        guard (1...64).contains(bytes.count), (0x61...0x7A).contains(bytes[0]),
            bytes.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5F })
        else { return nil }
        return Self.namespace + code
    }
}

/// Thrown by a rule that cannot decide now (a service it needs is down): the whole push is
/// answered `503` with `Retry-After`, nothing of it is applied, and the client sends it again.
public struct RuleUnavailable: Error, Sendable, Equatable {
    /// Why, for the server's log.
    public var reason: String
    /// Whole seconds the client waits before sending again, 1 at least.
    public var retryAfter: Int

    /// "Not now", for `reason`; the client retries after `retryAfter` seconds (30 by default).
    public init(_ reason: String, retryAfter: Int = 30) {
        self.reason = reason
        self.retryAfter = max(1, retryAfter)
    }
}
