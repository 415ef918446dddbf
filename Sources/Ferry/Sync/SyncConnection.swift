import FerryProtocol
import Foundation
import Logging

/// Supplies the signed-in user's current token. Ferry asks for one when it has none, when the
/// one it has is within 30 seconds of the `exp` its JWT claims, and once after the server
/// refused it (401); it never asks per request. A provider may therefore fetch over the network.
public typealias TokenProvider = @Sendable () async throws -> String

/// Sends protocol requests the way a good citizen does: authenticated, paced from
/// the `RateLimit-*` headers so that 429 is rare, waiting out `Retry-After` on 429
/// and 503, and retrying resets, timeouts and 5xx with capped, jittered backoff.
/// Every request and every wait goes to the journal.
actor SyncConnection {
    private let transport: any SyncTransport
    private let tokens: TokenCache
    private let clock: any Clock<Duration>
    private let retry: RetryPolicy
    let journal: Journal
    private let status: StatusCenter
    private let logger = Logger(label: "ferry.connection")
    private var random: JitterGenerator
    /// Sent as `Ferry-Client-ID` with every request, for the server's access log.
    private let clientID: @Sendable () -> String
    /// Requests answered 429 so far, for reports.
    private(set) var rateLimitedCount = 0
    private(set) var requestCount = 0
    /// What every request says of the protocol and the app.
    private let appHeaders: [String: String]
    /// Set by the server's `426 update_required`: from then on nothing is sent, for the life of
    /// this client (the updated app is a new one).
    private(set) var updateRequired: UpdateRequired?

    init(
        transport: any SyncTransport,
        tokens: TokenCache,
        clock: any Clock<Duration>,
        retry: RetryPolicy,
        journal: Journal,
        status: StatusCenter,
        random: JitterGenerator = JitterGenerator(),
        app: AppIdentity = AppIdentity(),
        clientID: @escaping @Sendable () -> String
    ) {
        self.appHeaders = app.headers
        self.clientID = clientID
        self.transport = transport
        self.tokens = tokens
        self.clock = clock
        self.retry = retry
        self.journal = journal
        self.status = status
        self.random = random
    }

    /// Sends `request` until it gets a final answer: 2xx, or a 4xx other than 429
    /// (returned for the caller to handle). A 401 gets one more try with a new token before it
    /// is thrown. Gives up after the retry budget. With `retryAs`, a try after a failure sends
    /// what it returns instead (an upload goes on from the offset the server holds, not from
    /// the one the failed try started at).
    func send(_ request: TransportRequest, retryAs: (@Sendable () async throws -> TransportRequest)? = nil) async throws -> TransportResponse {
        var attempt = 0
        var renewedToken = false
        var next = request
        while true {
            try Task.checkCancellation()
            attempt += 1
            if attempt > 1, let retryAs { next = try await retryAs() }
            var request = next
            let token = try await authorize(&request)
            if request.body != nil, request.headers["Content-Type"] == nil { request.headers["Content-Type"] = "application/json" }
            let started = ContinuousClock.now
            let response: TransportResponse
            do {
                requestCount += 1
                response = try await transport.send(request)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                await journal.record(
                    JournalEvent(
                        kind: .request,
                        message: "\(request.method) \(request.path) failed: \(error)",
                        details: [
                            .method: request.method, .path: String(request.path.prefix { $0 != "?" }), .bytes: "\(request.body?.count ?? 0)",
                            .attempt: "\(attempt)",
                        ]
                    )
                )
                try await backOff(attempt: attempt, reason: "network error: \(error)", underlying: error)
                continue
            }
            let milliseconds = started.duration(to: .now).milliseconds
            await journal.record(
                JournalEvent(
                    kind: .request,
                    message: "\(request.method) \(request.path) → \(response.status)",
                    details: [
                        .method: request.method, .path: String(request.path.prefix { $0 != "?" }), .bytes: "\(request.body?.count ?? 0)",
                        .received: "\(response.body.count)", .status: "\(response.status)",
                        .ms: "\(milliseconds)", .attempt: "\(attempt)",
                    ]
                )
            )
            switch response.status {
            case 200..<300:
                try await pace(after: response)
                return response
            case 429, 503:
                try await pause(
                    afterFailedAttempt: attempt,
                    status: response.status,
                    retryAfter: response.integerHeader("Retry-After"),
                    reason: "server error \(response.status)"
                )
            case 401 where !renewedToken:
                // Revoked or expired early: a token from the provider gets one try, not the retry budget.
                renewedToken = true
                await tokens.refused(token)
                await journal.record(JournalEvent(kind: .token, message: "the server refused the token; asking for a new one"))
            case 401:
                await tokens.refused(token)  // the next run starts with a new one
                throw FerryError.unauthorized(Self.message(in: response))
            case 426 where Self.requiresUpdate(response.body):
                throw await refuseFromNowOn(response.body)
            case 400..<500, 507:
                return response  // 507: over the attachment quota, which waiting does not end
            default:
                try await backOff(attempt: attempt, reason: "server error \(response.status): \(Self.message(in: response))")
            }
        }
    }

    /// Opens the server's event stream once (`GET /v1/events`), authenticated like every request
    /// and naming the client, whose own pushes do not wake it. A 401 marks the token refused, so
    /// the next attempt asks for a new one; retrying is the caller's (`LiveUpdates`).
    func openEventStream() async throws -> TransportStream {
        var request = TransportRequest(method: "GET", path: Endpoint.events, headers: ["Accept": "text/event-stream"])
        let token = try await authorize(&request)
        let stream: TransportStream
        do {
            stream = try await transport.openStream(request)
        } catch let error as EventStreamsUnsupported {
            throw error
        } catch {
            await journal.record(
                JournalEvent(kind: .liveStream, message: "GET \(Endpoint.events) failed: \(error)", details: [.path: Endpoint.events])
            )
            throw error
        }
        await journal.record(
            JournalEvent(
                kind: .liveStream,
                message: "GET /v1/events → \(stream.status)",
                details: [.path: Endpoint.events, .status: "\(stream.status)"]
            )
        )
        if stream.status == 401 { await tokens.refused(token) }
        return try await refusingIfUpdateRequired(stream)
    }

    /// Opens a streamed exchange, authenticated as `send`'s, once: resuming after a failure is
    /// the caller's (a download goes on from the bytes it holds, `pause(afterFailedAttempt:reason:)` between).
    ///
    /// With `orSend`, a transport that cannot stream (``EventStreamsUnsupported``: an app's own,
    /// which implements only `send(_:)`) is sent the request whole, and its body is the stream's
    /// one chunk: a download asks for a chunk at a time, so memory holds one chunk either way.
    func openStream(_ request: TransportRequest, orSend: Bool = false) async throws -> TransportStream {
        var request = request
        let token = try await authorize(&request)
        requestCount += 1
        let stream: TransportStream
        do {
            stream = try await transport.openStream(request)
        } catch is EventStreamsUnsupported where orSend {
            let response = try await transport.send(request)
            stream = TransportStream(
                status: response.status,
                headers: response.headers,
                body: AsyncThrowingStream { continuation in
                    if !response.body.isEmpty { continuation.yield(response.body) }
                    continuation.finish()
                }
            )
        }
        await journal.record(
            JournalEvent(
                kind: .request,
                message: "\(request.method) \(request.path) → \(stream.status)",
                details: [.method: request.method, .path: request.path, .status: "\(stream.status)"]
            )
        )
        if stream.status == 401 { await tokens.refused(token) }
        return try await refusingIfUpdateRequired(stream)
    }

    /// Waits before the try after failed try `attempt`, the one retry policy of every loop of the
    /// client (`send`, downloads, an upload's busy answers): after a `429` or `503`, what its
    /// `Retry-After` asks (1 s when it says nothing), else a backoff with jitter; throws once the
    /// retry budget is spent (four times as many tries when the server said how long to wait).
    func pause(afterFailedAttempt attempt: Int, status: Int? = nil, retryAfter: Int? = nil, reason: String) async throws {
        guard let status, status == 429 || status == 503 else { return try await backOff(attempt: attempt, reason: reason) }
        if status == 429 { rateLimitedCount += 1 }
        let seconds = Self.serverWait(retryAfter.map(Double.init) ?? 1)
        guard attempt < retry.maximumAttempts * 4 else { throw FerryError.unreachable("still \(status) after \(attempt) attempts") }
        try await wait(
            .seconds(seconds),
            reason: status == 429 ? "rate limited (Retry-After \(seconds) s)" : "server unavailable (Retry-After \(seconds) s)"
        )
    }

    /// Signs `request` with the current token and names the client and the app, as every
    /// request is sent; returns the token, which a 401 marks refused. Once the server required
    /// an update, throws instead: nothing more is sent.
    private func authorize(_ request: inout TransportRequest) async throws -> String {
        if let updateRequired { throw FerryError.updateRequired(updateRequired) }
        let token = try await tokens.token()
        // A 426 may have come while the token provider was asked.
        if let updateRequired { throw FerryError.updateRequired(updateRequired) }
        request.headers["Authorization"] = "Bearer \(token)"
        request.headers["Ferry-Client-ID"] = clientID()
        request.headers.merge(appHeaders) { _, app in app }
        return token
    }

    /// The server answered `426 update_required`: stop sending, say so in the status and the
    /// journal once, and return the error every request of this client throws from now on.
    private func refuseFromNowOn(_ body: Data) async -> FerryError {
        let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: body)
        let refusal = UpdateRequired(
            message: envelope?.error.message ?? "the server requires a newer version of this app",
            minimum: envelope?.error.minimum ?? UpdateRequirement()
        )
        if updateRequired == nil {
            updateRequired = refusal
            logger.warning("the server requires an update; nothing more is sent", metadata: ["message": "\(refusal.message)"])
            await journal.record(
                JournalEvent(
                    kind: .updateRequired,
                    message: "the server requires an update, nothing more is sent until the app is updated: \(refusal.message)"
                )
            )
            await status.update { $0.updateRequired = refusal }
        }
        return FerryError.updateRequired(refusal)
    }

    /// `stream`, unless it is the server's `426 update_required` (thrown, and nothing more is
    /// sent). A proxy's own 426 is handled as any refusal, by the caller; its body was read.
    private func refusingIfUpdateRequired(_ stream: TransportStream) async throws -> TransportStream {
        guard stream.status == 426 else { return stream }
        let body = (try? await Self.collect(stream, upTo: 64 * 1024)) ?? Data()
        if Self.requiresUpdate(body) { throw await refuseFromNowOn(body) }
        return TransportStream(status: stream.status, headers: stream.headers, body: AsyncThrowingStream { $0.finish() })
    }

    /// Whether a `426` is the server's `update_required`, not a proxy's demand to upgrade.
    private static func requiresUpdate(_ body: Data) -> Bool {
        (try? JSONDecoder().decode(ErrorEnvelope.self, from: body))?.code == .updateRequired
    }

    /// The first `limit` bytes of a streamed answer's body (an error envelope).
    private static func collect(_ stream: TransportStream, upTo limit: Int) async throws -> Data {
        var body = Data()
        for try await chunk in stream.body {
            body.append(chunk.prefix(limit - body.count))
            if body.count >= limit { break }
        }
        return body
    }

    /// The user signed out: a token request in progress is abandoned.
    func stop() async {
        await tokens.stop()
    }

    static func message(in response: TransportResponse) -> String {
        (try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body).error.message) ?? "HTTP \(response.status)"
    }

    /// When the quota is spent, wait for one request's worth of refill before going on.
    private func pace(after response: TransportResponse) async throws {
        guard let remaining = response.integerHeader(ProtocolHeaders.rateLimitRemaining), remaining == 0,
            let reset = response.integerHeader(ProtocolHeaders.rateLimitReset),
            let limit = response.integerHeader(ProtocolHeaders.rateLimitLimit), limit > 0
        else { return }
        let seconds = Self.serverWait(Double(reset) / Double(limit))
        try await wait(.seconds(seconds), reason: "pacing: quota of \(limit) spent")
    }

    /// The longest wait a server's headers can ask for: one that asks more (a misconfigured
    /// proxy, a hostile server) must not stall the queue for days, nor overflow a clock.
    static let longestServerWait = 3600

    /// Whole seconds to wait for what a header asked: at least 1, at most `longestServerWait`.
    static func serverWait(_ seconds: Double) -> Int {
        guard seconds.isFinite, seconds < Double(longestServerWait) else { return longestServerWait }
        return max(1, Int(seconds.rounded(.up)))
    }

    private func backOff(attempt: Int, reason: String, underlying: (any Error)? = nil) async throws {
        guard attempt < retry.maximumAttempts else {
            throw FerryError.unreachable("\(reason), after \(attempt) attempts", underlying: underlying)
        }
        try await wait(retry.delay(forAttempt: attempt, using: &random), reason: "backing off after \(reason)")
    }

    private func wait(_ duration: Duration, reason: String) async throws {
        let seconds = duration.seconds
        logger.debug("waiting", metadata: ["seconds": "\(seconds)", "reason": "\(reason)"])
        await journal.record(JournalEvent(kind: .wait, message: reason, details: [.seconds: String(format: "%.3f", seconds)]))
        let previous = await status.status.phase
        await status.update { $0.phase = .waiting(seconds: seconds, reason: reason) }
        try await clock.sleep(for: duration)
        await status.update { $0.phase = previous }
    }
}
