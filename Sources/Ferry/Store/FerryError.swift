import FerryProtocol

/// An error of the client library: a stable ``Code`` an app can switch on and keep, a message
/// saying what to do about it, and the error underneath when there was one.
///
/// Two errors are equal when their codes are: compare codes, not sentences. New codes may be
/// added in later versions, so a `switch` over them has a `default`. Cancelling a task that
/// waits on Ferry surfaces as Swift's `CancellationError`.
///
/// For example:
///
/// ```swift
/// do {
///     try await session.sync()
/// } catch let error as FerryError where error.code == .unauthorized {
///     await signInAgain()
/// } catch FerryError.Code.unreachable {
///     showOfflineBanner()
/// }
/// ```
public struct FerryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, by name; its `rawValue` is stable across versions (store it, log it).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The code's name, as `FerryError.Code.unauthorized.rawValue` is `"unauthorized"`.
        public let rawValue: String

        /// A code by name; an unknown name makes a code no error of this version has.
        public init(rawValue: String) { self.rawValue = rawValue }

        /// A synced table is missing or does not fit its registration.
        public static let invalidTable = Code(rawValue: "invalidTable")
        /// The server refused the credentials; sync stops until a new token is provided.
        public static let unauthorized = Code(rawValue: "unauthorized")
        /// The server answered in a way the protocol does not allow (a bug on one side).
        public static let protocolViolation = Code(rawValue: "protocolViolation")
        /// A request could not be completed and the retry budget ran out.
        public static let unreachable = Code(rawValue: "unreachable")
        /// Another client (another process on the same store) took over this store's sync while
        /// this run was in progress; nothing was lost, the other client resends what was in flight.
        public static let leaseLost = Code(rawValue: "leaseLost")
        /// The store file cannot be used: not a SQLite database, or not one Ferry can read.
        /// Nothing in it was changed.
        public static let unreadableStore = Code(rawValue: "unreadableStore")
        /// The engine was stopped (its user signed out, or nobody is signed in): there is nothing
        /// to sync with it. Ask the session for the signed-in user's.
        public static let stopped = Code(rawValue: "stopped")
        /// The run was stopped before it finished so that a background task could end in time
        /// (``SyncSession/backgroundSync(timeLimit:)``): its batch was answered or went back to
        /// the queue, nothing was lost, and it runs again when the app is active.
        public static let interrupted = Code(rawValue: "interrupted")
        /// A write to a space the store knows it may only read (its role is `read`); nothing was
        /// captured. The message names the space and the role.
        public static let readOnlySpace = Code(rawValue: "readOnlySpace")
        /// The server refused a space request (PROTOCOL.md, "Spaces"); ``FerryError/serverCode``
        /// holds its code (`forbidden`, `not_found`, `space_exists`, `last_admin`, `too_many_spaces`, `bad_request`).
        public static let refused = Code(rawValue: "refused")
        /// An attachment could not be taken in, uploaded or fetched: a file that cannot be read,
        /// bytes the server refused or does not hold for this user. The message names the
        /// attachment and what to do; a download the server refused carries its code in
        /// ``FerryError/serverCode`` (`not_found`: nothing this user may read under the digest).
        public static let attachment = Code(rawValue: "attachment")
        /// Something Ferry does not name went wrong during a run (the store's disk full, an
        /// error of the app's own schema); ``FerryError/underlying`` holds it.
        public static let unexpected = Code(rawValue: "unexpected")
        /// The server serves no client of this app's version (`426 update_required`): nothing
        /// more is sent until the app is updated, every change stays queued, the store stays
        /// usable. The message is the server's, for the user; ``SyncStatus/updateRequired`` holds
        /// the minimum too.
        public static let updateRequired = Code(rawValue: "updateRequired")

        /// The code's name.
        public var description: String { rawValue }

        /// Matches an error of this code, in a `catch` or a `switch`: `catch FerryError.Code.stopped`.
        /// ``readOnlySpace`` also matches the error SQLite throws from the app's own write to a
        /// read-only space (``FerryError/init(readOnlySpaceRefusal:)``).
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? FerryError)?.code == code || (code == .readOnlySpace && SpaceGuard.isRefusal(error))
        }
    }

    /// What went wrong.
    public let code: Code
    /// What happened and what to do about it, for people; not for comparing.
    public let message: String
    /// The server's error code, for ``Code/refused``; `nil` otherwise.
    public let serverCode: String?
    /// The error underneath, when there was one: the last network error behind ``Code/unreachable``,
    /// SQLite's behind ``Code/unreadableStore``, what an answer failed to decode with behind ``Code/protocolViolation``.
    public let underlying: (any Error)?

    /// The app's own write to a space the store knows it may only read, refused in its transaction
    /// by SQLite (a `DatabaseError` whose message names the space and role), as a ``Code/readOnlySpace``
    /// error with SQLite's as `underlying`; `nil` for any other error.
    ///
    /// ```swift
    /// do { try await store.database.write { db in try job.update(db) } }
    /// catch FerryError.Code.readOnlySpace { showReadOnlyBanner() }
    /// ```
    public init?(readOnlySpaceRefusal error: any Error) {
        guard SpaceGuard.isRefusal(error), let message = (error as? DatabaseError)?.message else { return nil }
        self.init(.readOnlySpace, String(message.dropFirst("ferry: ".count)), underlying: error)
    }

    /// An error with `code`; most are made with the static functions named after their code.
    public init(_ code: Code, _ message: String, serverCode: String? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.serverCode = serverCode
        self.underlying = underlying
    }

    /// Equal by code: the message may say it differently from one version to the next.
    public static func == (a: FerryError, b: FerryError) -> Bool { a.code == b.code }

    /// A synced table is missing or does not fit its registration.
    public static func invalidTable(_ message: String) -> FerryError { FerryError(.invalidTable, message) }
    /// The server refused the credentials.
    public static func unauthorized(_ message: String) -> FerryError { FerryError(.unauthorized, message) }
    /// The server answered in a way the protocol does not allow; `underlying` is what its answer failed to decode with, if any.
    public static func protocolViolation(_ message: String, underlying: (any Error)? = nil) -> FerryError {
        FerryError(.protocolViolation, message, underlying: underlying)
    }
    /// A request could not be completed and the retry budget ran out; `underlying` is the last network error, if any.
    public static func unreachable(_ message: String, underlying: (any Error)? = nil) -> FerryError {
        FerryError(.unreachable, message, underlying: underlying)
    }
    /// Another client took over this store's sync.
    public static func leaseLost(_ message: String) -> FerryError { FerryError(.leaseLost, message) }
    /// The store file cannot be used; `underlying` is SQLite's error, if any.
    public static func unreadableStore(_ message: String, underlying: (any Error)? = nil) -> FerryError {
        FerryError(.unreadableStore, message, underlying: underlying)
    }
    /// The engine was stopped.
    public static func stopped(_ message: String) -> FerryError { FerryError(.stopped, message) }
    /// The run was stopped so that a background task could end in time.
    public static func interrupted(_ message: String) -> FerryError { FerryError(.interrupted, message) }
    /// A write to a space the store may only read.
    public static func readOnlySpace(_ message: String) -> FerryError { FerryError(.readOnlySpace, message) }
    /// An ``Code/attachment`` error saying `message`.
    public static func attachment(_ message: String) -> FerryError { FerryError(.attachment, message) }
    /// An ``Code/updateRequired`` error with the server's message.
    public static func updateRequired(_ refusal: UpdateRequired) -> FerryError {
        FerryError(.updateRequired, refusal.message, serverCode: ErrorCode.updateRequired.rawValue)
    }
    /// `error` as a `FerryError`: itself if it is one, else ``Code/unexpected`` holding it.
    public init(wrapping error: any Error) {
        self = error as? FerryError ?? FerryError(.unexpected, "\(error)", underlying: error)
    }

    /// The server refused a space request with its error `code` and `message`.
    public static func refused(code: String, message: String) -> FerryError { FerryError(.refused, message, serverCode: code) }

    /// The error in one line, as logs, the journal and ``SyncStatus/lastError`` show it.
    public var description: String {
        switch code {
        case .invalidTable: "synced table: \(message)"
        case .unauthorized: "the server refused the token: \(message)"
        case .protocolViolation: "unexpected server response: \(message)"
        case .unreachable: "server unreachable: \(message)"
        case .leaseLost: "sync stopped: \(message)"
        case .unreadableStore: "cannot open the store: \(message)"
        case .stopped: "not syncing: \(message)"
        case .interrupted: "sync interrupted: \(message)"
        case .attachment: "attachment: \(message)"
        case .refused: "the server refused the request (\(serverCode ?? "?")): \(message)"
        default: message
        }
    }
}
