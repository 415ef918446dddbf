import FerryProtocol

/// Errors of the client library, each with what to do about it. Cancelling a task that waits on
/// Ferry surfaces as Swift's `CancellationError`.
public enum FerryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A synced table is missing or does not fit its registration.
    case invalidTable(String)
    /// The server refused the credentials; sync stops until a new token is provided.
    case unauthorized(String)
    /// The server answered in a way the protocol does not allow (a bug on one side).
    case protocolViolation(String)
    /// A request could not be completed and the retry budget ran out.
    case unreachable(String)
    /// Another client (another process on the same store) took over this store's sync while
    /// this run was in progress; nothing was lost, the other client resends what was in flight.
    case leaseLost(String)
    /// The store file cannot be used: not a SQLite database, or not one Ferry can read.
    /// Nothing in it was changed.
    case unreadableStore(String)
    /// The engine was stopped (its user signed out, or nobody is signed in): there is nothing
    /// to sync with it. Ask the session for the signed-in user's.
    case stopped(String)
    /// The run was stopped before it finished so that a background task could end in time
    /// (`SyncSession.backgroundSync(timeLimit:)`): its batch was answered or went back to the
    /// queue, nothing was lost, and it runs again when the app is active.
    case interrupted(String)
    /// A write to a space the store knows it may only read (its role is `read`); nothing was
    /// captured. The message names the space and the role.
    case readOnlySpace(String)
    /// The server refused a space request (PROTOCOL.md, "Spaces"): its error `code`
    /// (`forbidden`, `not_found`, `space_exists`, `last_admin`, `too_many_spaces`, `bad_request`) and message.
    case refused(code: String, message: String)

    /// The error in one line, as logs, the journal and `SyncStatus.lastError` show it.
    public var description: String {
        switch self {
        case .invalidTable(let why): "synced table: \(why)"
        case .unauthorized(let why): "the server refused the token: \(why)"
        case .protocolViolation(let why): "unexpected server response: \(why)"
        case .unreachable(let why): "server unreachable: \(why)"
        case .leaseLost(let why): "sync stopped: \(why)"
        case .unreadableStore(let why): "cannot open the store: \(why)"
        case .stopped(let why): "not syncing: \(why)"
        case .interrupted(let why): "sync interrupted: \(why)"
        case .readOnlySpace(let why): why
        case .refused(let code, let message): "the server refused the request (\(code)): \(message)"
        }
    }
}
