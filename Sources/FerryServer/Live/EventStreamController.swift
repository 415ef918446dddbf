import FerryProtocol
import Foundation
import Hummingbird
import ServiceLifecycle

/// `GET /v1/events`: a Server-Sent Events stream that says when something the user reads
/// changed (PROTOCOL.md, "Live changes"). It carries no data: the client pulls.
struct EventStreamController: Sendable {
    let storage: any SyncStorage
    let live: LiveChanges

    func events(_ request: Request, context: FerryRequestContext) async throws -> Response {
        guard let userID = context.userID, let expiresAt = context.tokenExpiry else { throw AuthFailure.missingHeader }
        var client: String?
        if let header = request.headers[.ferryClientID] {
            if let problem = ProtocolValidation.clientIDProblem(header) { throw ProtocolViolation.badRequest("Ferry-Client-ID: \(problem)") }
            client = header
        }
        guard let subscription = live.open(user: userID, client: client, spaces: [], expiresAt: expiresAt) else {
            var error = FerryHTTPError(
                .rateLimited,
                "at most \(live.configuration.maxStreamsPerUser) event streams per user are open at once; close one or retry later"
            )
            error.headers[.retryAfter] = "\(Self.retryAfterSeconds)"
            throw error
        }
        // The spaces are read once the stream is registered: a grant committed after this read
        // wakes it (its memberships are read again), one committed before is in it. A change
        // signalled before the spaces are set is in the pull the client makes after `ready`.
        if !context.isService {
            do {
                live.setSpaces(try await storage.memberships(of: userID).map(\.space), of: subscription.id)
            } catch {
                live.close(subscription.id)
                throw error
            }
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-store"
        let stream = StreamLoop(storage: storage, live: live, userID: userID, isService: context.isService, subscription: subscription)
        // The slot is released however the response ends, also when its body never runs (a
        // client that resets the connection before the head is written): the body's closure
        // owns it, and a dropped response drops the closure.
        let slot = StreamSlot(live: live, id: subscription.id)
        return Response(
            status: .ok,
            headers: headers,
            body: ResponseBody { writer in
                // A client that goes away ends its stream at once, not at the next keep-alive's failed write.
                try await request.body.consumeWithInboundCloseHandler { _ in
                    try await stream.run(&writer)
                } onInboundClosed: {
                    slot.release()
                }
                slot.release()
            }
        )
    }

    /// How long a client refused for too many streams waits before it tries again.
    static let retryAfterSeconds = 30
}

/// A stream's place in the hub's count of the user's streams, given back when the stream ends
/// or when the response that would have carried it is dropped unsent.
private final class StreamSlot: Sendable {
    let live: LiveChanges
    let id: UInt64

    init(live: LiveChanges, id: UInt64) {
        self.live = live
        self.id = id
    }

    /// Closes the stream; closing it again does nothing.
    func release() { live.close(id) }

    deinit { live.close(id) }
}

/// One stream's task: `ready`, then an event for each wake, until the token expires, the server
/// shuts down or the client goes away.
private struct StreamLoop: Sendable {
    let storage: any SyncStorage
    let live: LiveChanges
    let userID: String
    let isService: Bool
    let subscription: LiveChanges.Subscription

    static let ready = ByteBuffer(string: "event: \(LiveEventName.ready)\ndata: {}\n\n")
    static let change = ByteBuffer(string: "event: \(LiveEventName.change)\ndata: {}\n\n")
    static let keepAlive = ByteBuffer(string: ": keep-alive\n\n")

    func run(_ writer: inout any ResponseBodyWriter) async throws {
        let id = subscription.id
        defer { live.close(id) }
        try await withGracefulShutdownHandler {
            try await writer.write(Self.ready)
            live.wrote(id)
            for await _ in subscription.wakes {
                let wake = live.take(id)
                if wake.end { break }
                if wake.memberships, !isService {
                    live.setSpaces(try await storage.memberships(of: userID).map(\.space), of: id)
                }
                if wake.change {
                    try await writer.write(Self.change)
                    live.wrote(id)
                    // At most one event per interval: what arrives meanwhile is one more event after it.
                    try await Task.sleep(for: live.configuration.coalescingInterval)
                } else if wake.keepAlive {
                    try await writer.write(Self.keepAlive)
                    live.wrote(id)
                }
            }
        } onGracefulShutdown: { [live] in
            live.close(id)
        }
        try await writer.finish(nil)
    }
}
