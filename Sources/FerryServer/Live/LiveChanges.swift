import FerryProtocol
import Foundation
import NIOConcurrencyHelpers

/// The event streams this process holds, and which of them a change wakes.
///
/// Streams are indexed by user and by space, so a change wakes only the streams of the users
/// who may read it, in time proportional to their number, and an idle stream costs a table
/// entry and a suspended task: no timer of its own (one ticker, `tick(now:)`, sends the
/// keep-alives and ends streams whose token expired). A stream's state is a set of flags its
/// task takes in one step (`take(_:)`), so any number of signals between two looks is one event.
public final class LiveChanges: Sendable {
    /// Limits and pacing of the event streams.
    public struct Configuration: Sendable {
        /// Most streams one user may hold open on this process; the next is answered `429`.
        public var maxStreamsPerUser = 16
        /// A stream quiet for this long gets a comment line, so proxies keep it open.
        public var keepAliveInterval: Duration = .seconds(15)
        /// The least time between two `change` events on one stream: a burst is one event.
        public var coalescingInterval: Duration = .milliseconds(50)

        /// The defaults: 16 streams a user, a keep-alive after 15 s of quiet, at most one event every 50 ms.
        public init() {}
    }

    /// What a stream's task must do, taken in one step.
    struct Wake: Equatable {
        /// Write a `change` event.
        var change = false
        /// The user's memberships changed: read them again before writing.
        var memberships = false
        /// Write a keep-alive comment.
        var keepAlive = false
        /// End the stream (its token expired, or the server is shutting down).
        var end = false
    }

    /// One open stream, as `open` hands it to its task.
    struct Subscription: Sendable {
        let id: UInt64
        /// Yields when `take(_:)` has something; buffers one element, so signals are never lost between looks.
        let wakes: AsyncStream<Void>
    }

    private struct Stream {
        var user: String
        /// The client the stream speaks for (`Ferry-Client-ID`): its own pushes do not wake it.
        var client: String?
        var spaces: Set<String>
        var expiresAt: Date
        var lastWrite: ContinuousClock.Instant
        var wake = Wake()
        let continuation: AsyncStream<Void>.Continuation
    }

    private struct State {
        var nextID: UInt64 = 0
        var streams: [UInt64: Stream] = [:]
        /// By the user's bytes (`ExactKey`): ids that differ only in normalization are two users.
        var byUser: [ExactKey: Set<UInt64>] = [:]
        var bySpace: [String: Set<UInt64>] = [:]
    }

    /// Limits and pacing.
    public let configuration: Configuration
    private let state = NIOLockedValueBox(State())

    /// A hub with no stream yet.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// How many streams are open.
    public var openStreams: Int { state.withLockedValue { $0.streams.count } }

    /// Registers a stream of `user` reading `spaces`; `nil` when the user already holds
    /// `maxStreamsPerUser` streams here.
    func open(user: String, client: String?, spaces: some Sequence<String>, expiresAt: Date) -> Subscription? {
        let (wakes, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        return state.withLockedValue { state in
            guard state.byUser[ExactKey(user), default: []].count < configuration.maxStreamsPerUser else { return nil }
            state.nextID += 1
            let id = state.nextID
            let stream = Stream(
                user: user,
                client: client,
                spaces: Set(spaces),
                expiresAt: expiresAt,
                lastWrite: .now,
                continuation: continuation
            )
            state.streams[id] = stream
            state.byUser[ExactKey(user), default: []].insert(id)
            for space in stream.spaces { state.bySpace[space, default: []].insert(id) }
            return Subscription(id: id, wakes: wakes)
        }
    }

    /// Forgets a stream (it ended).
    func close(_ id: UInt64) {
        state.withLockedValue { state in
            guard let stream = state.streams.removeValue(forKey: id) else { return }
            state.byUser[ExactKey(stream.user)]?.remove(id)
            if state.byUser[ExactKey(stream.user)]?.isEmpty == true { state.byUser[ExactKey(stream.user)] = nil }
            for space in stream.spaces { Self.remove(id, from: space, in: &state) }
            stream.continuation.finish()
        }
    }

    /// The spaces a stream reads, read again after its user's memberships changed.
    func setSpaces(_ spaces: some Sequence<String>, of id: UInt64) {
        state.withLockedValue { state in
            guard let old = state.streams[id]?.spaces else { return }
            let new = Set(spaces)
            for space in old.subtracting(new) { Self.remove(id, from: space, in: &state) }
            for space in new.subtracting(old) { state.bySpace[space, default: []].insert(id) }
            state.streams[id]?.spaces = new
        }
    }

    /// What the stream must do now, cleared; the stream's task calls it each time it wakes.
    func take(_ id: UInt64) -> Wake {
        state.withLockedValue { state in
            guard let wake = state.streams[id]?.wake else { return Wake(end: true) }
            state.streams[id]?.wake = Wake(end: wake.end)
            return wake
        }
    }

    /// The stream wrote something now: its keep-alive waits for another quiet interval.
    func wrote(_ id: UInt64) {
        state.withLockedValue { $0.streams[id]?.lastWrite = .now }
    }

    /// Wakes the streams that may read what `signals` changed: a user's own for their personal
    /// space and memberships, every member's for a space, all for `everything`; never the
    /// writing client's own stream.
    public func publish(_ signals: [ChangeSignal]) {
        state.withLockedValue { state in
            for signal in signals {
                switch signal {
                case .personal(let user, let writer):
                    for id in state.byUser[ExactKey(user)] ?? [] { Self.mark(id, in: &state, unlessWrittenBy: writer) { $0.change = true } }
                case .space(let space, let writer):
                    for id in state.bySpace[space] ?? [] { Self.mark(id, in: &state, unlessWrittenBy: writer) { $0.change = true } }
                case .memberships(let user):
                    for id in state.byUser[ExactKey(user)] ?? [] {
                        Self.mark(id, in: &state, unlessWrittenBy: nil) {
                            $0.change = true
                            $0.memberships = true
                        }
                    }
                case .everything:
                    for id in state.streams.keys {
                        Self.mark(id, in: &state, unlessWrittenBy: nil) {
                            $0.change = true
                            $0.memberships = true
                        }
                    }
                }
            }
        }
    }

    /// Sends keep-alives to streams quiet for `keepAliveInterval` and ends those whose token
    /// has expired; the ticker calls it about once a second.
    func tick(now: ContinuousClock.Instant = .now, date: Date = Date()) {
        state.withLockedValue { state in
            for (id, stream) in state.streams {
                if stream.expiresAt <= date {
                    Self.mark(id, in: &state, unlessWrittenBy: nil) { $0.end = true }
                } else if stream.lastWrite.duration(to: now) >= configuration.keepAliveInterval, !stream.wake.keepAlive {
                    Self.mark(id, in: &state, unlessWrittenBy: nil) { $0.keepAlive = true }
                }
            }
        }
    }

    /// Ends every stream: the server is shutting down, and would otherwise wait for them.
    func endAll() {
        state.withLockedValue { state in
            for id in state.streams.keys { Self.mark(id, in: &state, unlessWrittenBy: nil) { $0.end = true } }
        }
    }

    private static func mark(_ id: UInt64, in state: inout State, unlessWrittenBy writer: ChangeSignal.Writer?, _ change: (inout Wake) -> Void) {
        guard let stream = state.streams[id] else { return }
        if let writer, let client = stream.client, writer.user.hasSameBytes(as: stream.user), writer.client.hasSameBytes(as: client) { return }
        change(&state.streams[id]!.wake)
        stream.continuation.yield()
    }

    private static func remove(_ id: UInt64, from space: String, in state: inout State) {
        state.bySpace[space]?.remove(id)
        if state.bySpace[space]?.isEmpty == true { state.bySpace[space] = nil }
    }
}
