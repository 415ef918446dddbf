import FerryServer
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1

/// The reference server's application with its requests handed straight to its router, in
/// process (HummingbirdTesting's `.router`): for server rules that need no socket. Storage is
/// an in-memory SQLite database unless given.
public struct RouterServer: ServerEndpoint {
    private let client: any TestClientProtocol

    /// Runs `body` against a fresh application; `rateLimiter` replaces the in-process limiter
    /// that `rateLimit` would make.
    public static func run<T: Sendable>(
        storage: (any SyncStorage)? = nil,
        rateLimit: RateLimitPolicy? = nil,
        rateLimiter: (any RateLimiter)? = nil,
        _ body: @escaping @Sendable (RouterServer) async throws -> T
    ) async throws -> T {
        var logger = Logger(label: "ferry.test.router")
        logger.logLevel = .error
        let app = try await FerryServerApplication.make(
            configuration: ServerConfiguration(jwtSecret: TestServer.secret, rateLimit: rateLimit),
            storage: try storage ?? SQLiteSyncStorage(path: nil),
            rateLimiter: rateLimiter,
            logger: logger
        )
        return try await app.test(.router) { client in try await body(RouterServer(client: client)) }
    }

    public func perform(_ method: NIOHTTP1.HTTPMethod, _ path: String, headers: [(String, String)], body: Data?) async throws -> Reply {
        var fields = HTTPFields()
        for (name, value) in headers {
            guard let name = HTTPField.Name(name) else { throw TestFailure("\(name) is not a header name") }
            fields.append(HTTPField(name: name, value: value))
        }
        let response = try await client.execute(
            uri: path,
            method: HTTPRequest.Method(method.rawValue)!,
            headers: fields,
            body: body.map { ByteBuffer(bytes: $0) }
        )
        return Reply(
            status: response.status.code,
            headers: HTTPHeaders(response.headers.map { ($0.name.rawName, $0.value) }),
            body: Data(response.body.readableBytesView)
        )
    }
}
