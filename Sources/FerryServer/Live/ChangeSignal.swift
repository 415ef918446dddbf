import FerryProtocol
import Foundation

/// What one commit changed, as the event streams need it: whose data, and who wrote it. A
/// storage announces its commits with these (`SyncStorage/followChanges(_:)`); the streams of
/// the users who may read the data are woken (``LiveChanges``).
public enum ChangeSignal: Sendable, Hashable, Codable {
    /// Records of `user`'s personal space changed.
    case personal(user: String, writer: Writer?)
    /// Records of the space with id `space` changed.
    case space(String, writer: Writer?)
    /// `user`'s memberships changed (a grant, a role, a removal, a space created or deleted).
    case memberships(user: String)
    /// Anything may have changed: the feed may have missed signals (a lost connection).
    case everything

    /// The client whose push made a change: its own event stream is not woken for it, since the
    /// pull after that push already brought everything up to it (PROTOCOL.md, "Live changes").
    public struct Writer: Sendable, Hashable, Codable {
        /// The token's `sub` of the push.
        public var user: String
        /// The push's `clientID`.
        public var client: String

        /// A writer from its fields.
        public init(user: String, client: String) {
            self.user = user
            self.client = client
        }
    }

    /// The signals of a push that `response` answered: one per history it changed (a new
    /// mutation, past the client's `lastMutationID`, `applied` or `merged`; the others, resends
    /// answered from kept results included, changed nothing).
    static func of(
        push mutations: [IncomingMutation],
        response: PushResponse,
        after lastMutationID: Int64,
        caller: Caller,
        clientID: String
    ) -> [ChangeSignal] {
        let writer = Writer(user: caller.userID, client: clientID)
        var signals: [ChangeSignal] = []
        for (incoming, result) in zip(mutations, response.results)
        where incoming.mutation.id > lastMutationID && (result.status == .applied || result.status == .merged) {
            let signal: ChangeSignal = incoming.mutation.space.map { .space($0, writer: writer) } ?? .personal(user: caller.userID, writer: writer)
            if !signals.contains(signal) { signals.append(signal) }
        }
        return signals
    }

    /// The signal as a PostgreSQL notification's payload (JSON, well under its 8,000 bytes:
    /// ids are at most a few hundred bytes).
    var payload: String {
        (try? String(decoding: JSONEncoder().encode(self), as: UTF8.self)) ?? "{\"everything\":{}}"
    }

    /// The signal a payload holds; a payload this version cannot read (a newer server's) is
    /// taken as `everything`, so a stream is woken too often rather than never.
    init(payload: String) {
        self = (try? JSONDecoder().decode(ChangeSignal.self, from: Data(payload.utf8))) ?? .everything
    }
}
