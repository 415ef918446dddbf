import FerryProtocol
import FerryRules
import Foundation
import Hummingbird
import NIOPosix

/// The handlers of PROTOCOL.md's endpoints.
struct SyncController: Sendable {
    let storage: any SyncStorage
    let metrics: ServerMetrics
    /// How long a push's body may take to arrive (`ServerConfiguration/bodyTimeout`).
    var bodyTimeout: Duration = .seconds(30)
    /// The bytes of bodies the whole process holds at once (`ServerConfiguration/maxBodyBytesInFlight`).
    var bodies = BodyBudget(limit: ServerConfiguration.defaultMaxBodyBytesInFlight)
    /// A user's pulls in this process, one at a time (`UserLine`).
    let pulls = UserLine()
    /// Whether this server keeps attachments (`ServerConfiguration/attachments`).
    var attachments = true
    /// The least client versions served, which `/v1/health` publishes.
    var updatePolicy = UpdatePolicy()
    /// The app's rules over writes.
    var rules = ServerRules()

    /// `ok` when the database answers, with what this server can do: its protocol versions,
    /// its features and the minimum it requires (PROTOCOL.md, "Versions").
    func health(_ request: Request, context: FerryRequestContext) async throws -> Response {
        try await storage.checkHealth()
        typealias Feature = HealthResponse.Feature
        return try JSONResponse.make(
            HealthResponse(
                status: "ok",
                protocol: .init(min: ProtocolVersion.first.description, max: ProtocolVersion.current.description),
                features: [Feature.spaces, Feature.live] + (attachments ? [Feature.attachments, Feature.heldAttachments] : [])
                    + [Feature.updateRequired, Feature.largePages] + (rules.isEmpty ? [] : [Feature.rules]),
                minimum: updatePolicy.published
            )
        )
    }

    func push(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let userID = try authenticatedUser(context)
        // Refuse an announced oversized body before reading any of it; a body without a
        // length is read up to the limit and no further.
        if let length = request.headers[.contentLength].flatMap(Int.init), length > ProtocolLimits.maxPushBodyBytes {
            throw FerryHTTPError(.batchTooLarge, FerryHTTPError.batchTooLargeMessage)
        }
        let body = try await collectBody(of: request, context: context)
        defer { bodies.give(body.readableBytes) }
        context.facts.bodyBytes = body.readableBytes
        let pushRequest = try await Self.offloaded(ifLarge: body.readableBytes) { try PushRequest.decode(from: Data(body.readableBytesView)) }
        try pushRequest.validateBatch()
        context.facts.client = pushRequest.clientID  // validated: A-Z a-z 0-9 _ -, at most 64
        let response: PushResponse
        do {
            response = try await storage.push(
                caller: Caller(userID: userID, isService: context.isService),
                clientID: pushRequest.clientID,
                mutations: pushRequest.mutations.map { IncomingMutation($0, attachments: attachments) },
                rules: rules
            )
        } catch let unavailable as RuleUnavailable {
            // Nothing of the push was applied: the client sends it again, as after any 503.
            context.logger.warning("a rule said not now; the push is answered 503", metadata: ["reason": "\(unavailable.reason)"])
            var error = FerryHTTPError(.unavailable, "the server cannot judge this change now; retry in \(unavailable.retryAfter) s")
            error.headers[.retryAfter] = "\(unavailable.retryAfter)"
            throw error
        }
        metrics.recordMutations(response.results)
        context.logger.info(
            "push applied",
            metadata: [
                "client": "\(pushRequest.clientID)", "mutations": "\(pushRequest.mutations.count)",
                "lastMutationID": "\(response.lastMutationID)",
            ]
        )
        return JSONResponse.make(body: try response.jsonBody())
    }

    func pull(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let userID = try authenticatedUser(context)
        let query = request.uri.queryParameters
        var limit = ProtocolLimits.defaultPullLimit
        if let text = query.get("limit") {
            guard let value = Int(text), ProtocolLimits.pullLimitRange.contains(value) else {
                throw ProtocolViolation.badRequest(
                    "limit must be a whole number from 1 to \(ProtocolLimits.pullLimitRange.upperBound), got '\(text.prefix(40))'"
                )
            }
            limit = value
        }
        let cursor = query.get("cursor")
        let ownWrites = try ownWrites(request)
        let body = try await pulls.run(for: userID) {
            let page = try await storage.pull(userID: userID, cursor: cursor, limit: limit, ownWrites: ownWrites)
            return try await Self.offloaded(ifLarge: page.estimatedBytes) { page.responseBody() }
        }
        return JSONResponse.make(body: body)
    }

    /// `work` on NIO's thread pool when it handles more than 256 KiB, else here. Decoding a 4 MiB
    /// body or writing a 4 MiB page holds a thread for a while: on the cooperative pool (one
    /// thread a core) a few of them would stop every other request, another user's included;
    /// the system shares the cores between the pool's threads and those fairly.
    private static func offloaded<T: Sendable>(ifLarge bytes: Int, _ work: @escaping @Sendable () throws -> T) async throws -> T {
        bytes > 256 * 1024 ? try await NIOThreadPool.singleton.runIfActive(work) : try work()
    }

    /// A push's body, which must arrive within `bodyTimeout`. A late one is answered `408`, and the
    /// connection's input is closed: the server would otherwise read the rest of a trickled body
    /// to reach the next request, at the client's pace. Its bytes are counted against the
    /// process's `bodies` as they arrive (the caller gives them back): a body that would pass it
    /// is answered `503`, and the connection's input closed.
    private func collectBody(of request: Request, context: FerryRequestContext) async throws -> ByteBuffer {
        let body = request.body
        let bodies = self.bodies
        do {
            return try await withTimeLimit(bodyTimeout, clock: ContinuousClock()) {
                var collected = ByteBuffer()
                do {
                    for try await chunk in body {
                        guard collected.readableBytes + chunk.readableBytes <= ProtocolLimits.maxPushBodyBytes else {
                            throw FerryHTTPError(.batchTooLarge, FerryHTTPError.batchTooLargeMessage)
                        }
                        guard bodies.take(chunk.readableBytes) else {
                            var error = FerryHTTPError(
                                .unavailable,
                                "the server holds as many request bodies as it may at once; retry in \(FerryHTTPError.unavailableRetryAfter) s"
                            )
                            error.headers[.retryAfter] = "\(FerryHTTPError.unavailableRetryAfter)"
                            error.headers[.connection] = "close"
                            throw error
                        }
                        var chunk = chunk
                        collected.writeBuffer(&chunk)
                    }
                } catch {
                    bodies.give(collected.readableBytes)
                    throw error
                }
                return collected
            }
        } catch let error as FerryHTTPError where error.code == .unavailable {
            context.channel?.close(mode: .input, promise: nil)
            throw error
        } catch is TimeLimitExceeded {
            context.channel?.close(mode: .input, promise: nil)
            var error = FerryHTTPError(
                .requestTimeout,
                "the request body did not arrive within \(Int(bodyTimeout.seconds.rounded(.up))) s; send the whole body at once"
            )
            error.headers[.connection] = "close"
            throw error
        }
    }

    /// The writes a pull leaves out: `answered` with the `Ferry-Client-ID` header naming whose
    /// (PROTOCOL.md, "A client's own writes"); `nil` when the pull names none.
    private func ownWrites(_ request: Request) throws -> OwnWrites? {
        guard let text = request.uri.queryParameters.get("answered") else { return nil }
        let answered = try OwnWrites.ranges(text).get()
        guard let clientID = request.headers[.ferryClientID] else {
            throw ProtocolViolation.badRequest("answered needs the Ferry-Client-ID header naming the client it speaks for")
        }
        if let problem = ProtocolValidation.clientIDProblem(clientID) { throw ProtocolViolation.badRequest("Ferry-Client-ID: \(problem)") }
        return OwnWrites(clientID: clientID, answered: answered)
    }

    func metricsText(_ request: Request, context: FerryRequestContext) async throws -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
    }

    private func authenticatedUser(_ context: FerryRequestContext) throws -> String {
        guard let userID = context.userID else { throw AuthFailure.missingHeader }
        return userID
    }
}
