import FerryServer
import Foundation
import Logging
import ServiceLifecycle

/// A real Ferry server on loopback that a test stops and starts again on the same SQLite
/// file and attachment folder, as an operator restarts one. Each start listens on a new port, so clients must ask
/// for `baseURL` per request. A stop is graceful: requests in flight are answered first.
public actor RestartableServer {
    public nonisolated let databasePath: String
    /// The folder of the server's attachments (a `file:` blob store), kept across restarts.
    public nonisolated let attachmentFolder: String
    /// Where the server listens now; empty while it is stopped.
    public private(set) var baseURL = ""
    public private(set) var restarts = 0
    /// The app's rules the server runs.
    public nonisolated let rules: ServerRules
    private var group: ServiceGroup?
    private var running: Task<Void, any Error>?

    public init(
        databasePath: String = TestServer.temporaryDatabasePath(),
        attachmentFolder: String = TestDirectory.make("blobs").path,
        rules: ServerRules = ServerRules()
    ) {
        self.databasePath = databasePath
        self.attachmentFolder = attachmentFolder
        self.rules = rules
    }

    public func start() async throws {
        guard group == nil else { return }
        var logger = Logger(label: "ferry.test")
        logger.logLevel = .error
        let storage = try SQLiteSyncStorage(path: databasePath)
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, jwtSecret: TestServer.secret, rateLimit: nil)
        configuration.attachments = try await FileBlobStore(folder: attachmentFolder)
        configuration.rules = rules
        let app = try await FerryServerApplication.make(
            configuration: configuration,
            storage: storage,
            logger: logger,
            onServerRunning: { port in portContinuation.yield(port) }
        )
        let group = ServiceGroup(services: [app], logger: logger)
        running = Task {
            defer { portContinuation.finish() }
            try await group.run()
        }
        self.group = group
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            try await stop()
            throw TestFailure("the server did not start on \(databasePath)")
        }
        baseURL = "http://127.0.0.1:\(port)"
    }

    /// Stops gracefully and waits until the database is closed.
    public func stop() async throws {
        guard let group, let running else { return }
        self.group = nil
        self.running = nil
        baseURL = ""
        await group.triggerGracefulShutdown()
        try await running.value
    }

    public func restart() async throws {
        try await stop()
        try await start()
        restarts += 1
    }
}
