import AsyncHTTPClient
import Ferry
import FerryProtocol
import FerryServer
import Foundation
import GRDB
import NIOCore

/// `ferry bench --only live`: how fast another device's write reaches a watching device
/// (PROTOCOL.md, "Live changes"), against `ferry serve` child processes (two on PostgreSQL, the
/// writer on one and the watcher on the other):
/// - write-to-visible latency: device A's push acknowledged to device B's store holding it;
/// - 1,000 idle streams: the server's memory and CPU, and one change's latency to one of them;
/// - a burst of 1,000 single-record pushes: the watcher's runs, and the time until it holds all.
struct LiveBench {
    var database: DatabaseURL
    /// Writes timed one at a time.
    var writes = 200
    /// Milliseconds between two timed writes: a person's pace, past the watcher's least time
    /// between runs a server's change asks for (250 ms), so each write is timed on its own.
    var spacing: Duration = .milliseconds(300)
    var idleStreams = 1_000
    var burst = 1_000

    func run(in folder: URL) async throws -> [String] {
        let secret = TokenAuthority.randomSecret()
        let isPostgres = if case .postgres = database { true } else { false }
        var servers: [ServerProcess] = []
        defer { for server in servers { server.stop() } }
        for index in 0..<(isPostgres ? 2 : 1) {
            servers.append(
                try ServerProcess(
                    arguments: ["serve", "--database", database.description, "--port", "0", "--jwt-secret", secret, "--rate-limit", "off"]
                        + (isPostgres ? ["--pool-size", "8"] : []),
                    log: folder.appendingPathComponent("serve-live-\(index).log")
                )
            )
        }
        var endpoints: [URL] = []
        for server in servers { endpoints.append(URL(string: "http://127.0.0.1:\(try await server.port())")!) }
        let (writerEndpoint, watcherEndpoint) = (endpoints[0], endpoints[endpoints.count - 1])
        let authority = try await TokenAuthority(secret: secret)
        let run = String(UUID().uuidString.prefix(6).lowercased())
        let user = "\(run)-alice"
        let token = try await authority.issue(userID: user, ttl: .seconds(7200))
        var lines = ["live: on \(database)" + (isPostgres ? ", the writer on one server process and the watcher on another" : "")]

        let watcher = try await Watcher.start(user: user, token: token, server: watcherEndpoint, in: folder.appendingPathComponent("live-\(run)"))
        defer { Task { try? await watcher.session.signOut() } }
        let writer = Writer(endpoint: writerEndpoint, token: token)

        lines.append(try await writeToVisible(writer, watcher))
        lines.append(try await burstOfPushes(writer, watcher))
        lines.append(
            try await streamsAtRest(on: servers[servers.count - 1], run: run, authority: authority, writer: writerEndpoint, watcher: watcherEndpoint)
        )
        return lines
    }

    /// Write to visible, one write at a time.
    private func writeToVisible(_ writer: Writer, _ watcher: Watcher) async throws -> String {
        var latencies: [Double] = []
        for index in 1...writes {
            let acknowledged = try await writer.push(index).acknowledged
            let visible = try await watcher.waitUntilHolds(index)
            latencies.append(acknowledged.duration(to: visible).seconds * 1000)
            try await Task.sleep(for: spacing)
        }
        return String(
            format: "  write to visible, %d writes %d ms apart: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
            writes,
            Int(spacing.milliseconds),
            percentile(0.5, of: latencies),
            percentile(0.99, of: latencies),
            latencies.max() ?? 0
        )
    }

    /// A burst of single-record pushes while the watcher watches.
    private func burstOfPushes(_ writer: Writer, _ watcher: Watcher) async throws -> String {
        let runsBefore = await watcher.runs
        let burstStarted = ContinuousClock.now
        for index in (writes + 1)...(writes + burst) { _ = try await writer.push(index) }
        let burstPushed = ContinuousClock.now
        let holdsAll = try await watcher.waitUntilHolds(writes + burst)
        let burstRuns = await watcher.runs - runsBefore
        return String(
            format:
                "  burst of %d single-record pushes (%.2f s): the watcher made %d runs and held all %.2f s after the first push, %.0f ms after the last",
            burst,
            burstStarted.duration(to: burstPushed).seconds,
            burstRuns,
            burstStarted.duration(to: holdsAll).seconds,
            burstPushed.duration(to: holdsAll).seconds * 1000
        )
    }

    /// Idle streams on the watcher's server process: its memory and idle CPU, and one change to one of them.
    private func streamsAtRest(on server: ServerProcess, run: String, authority: TokenAuthority, writer: URL, watcher: URL) async throws -> String {
        let memoryBefore = server.residentMB
        let streams = try await IdleStreams.open(idleStreams, run: run, authority: authority, endpoint: watcher)
        try await Task.sleep(for: .seconds(1))
        let memoryAfter = server.residentMB
        let cpuBefore = server.cpuSeconds
        try await Task.sleep(for: .seconds(10))
        let cpuIdle = server.cpuSeconds - cpuBefore
        var changeLatencies: [Double] = []
        for round in 1...20 {
            let target = (round * 37) % idleStreams
            // From the push sent: the event may well arrive before the push's answer.
            let pushed = try await Writer(endpoint: writer, token: streams.tokens[target]).push(round, client: "other")
            let heard = try await streams.waitForChange(on: target)
            changeLatencies.append(pushed.sent.duration(to: heard).seconds * 1000)
        }
        await streams.close()
        return String(
            format:
                "  %d idle streams: server memory %.0f MiB before, %.0f MiB after (%.1f KiB a stream); %.2f s of CPU in 10 s idle; one change to one of them, push sent to event, median of 20: %.1f ms",
            idleStreams,
            memoryBefore,
            memoryAfter,
            (memoryAfter - memoryBefore) * 1024 / Double(idleStreams),
            cpuIdle,
            percentile(0.5, of: changeLatencies)
        )
    }

    private func percentile(_ fraction: Double, of values: [Double]) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.up)) - 1)]
    }

    /// Device A: pushes one record a request, as `ferry client sync` would a single change.
    struct Writer {
        let endpoint: URL
        let token: String

        /// Pushes record `index` (its value is `index`): when it was sent, and when the server acknowledged it.
        func push(_ index: Int, client: String = "writer") async throws -> (sent: ContinuousClock.Instant, acknowledged: ContinuousClock.Instant) {
            let sent = ContinuousClock.now
            let mutation = Mutation.upsert(id: Int64(index), entity: "events", entityID: "e-\(index)", data: ["value": .integer(Int64(index))])
            let body = try JSONEncoder().encode(PushRequest(clientID: client, mutations: [mutation]))
            let response = try await HTTPClientTransport(baseURL: endpoint).send(
                TransportRequest(
                    method: "POST",
                    path: Endpoint.push,
                    headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                    body: body
                )
            )
            guard response.status == 200 else { throw CommandFailure("a push answered \(response.status)") }
            return (sent, .now)
        }
    }

    /// Device B: a session keeping its store live, as an app does.
    struct Watcher {
        let session: SyncSession
        let engine: SyncSession.Engine
        let highest: AsyncStream<(Int, ContinuousClock.Instant)>
        let counter: RunCounter

        actor RunCounter {
            private(set) var runs = 0
            func count() { runs += 1 }
        }

        var runs: Int { get async { await counter.runs } }

        static func start(user: String, token: String, server: URL, in directory: URL) async throws -> Watcher {
            var configuration = SessionConfiguration(storeDirectory: directory, tables: [Benchmarks.table], schema: Benchmarks.schema())
            configuration.otherProcessCheckInterval = nil
            let session = SyncSession(configuration: configuration, transport: HTTPClientTransport(baseURL: server), token: { _ in token })
            try await session.signIn(user)
            guard let engine = await session.engine else { throw CommandFailure("the watcher did not sign in") }
            try await engine.scheduler.initialSync()
            let counter = RunCounter()
            let events = await engine.scheduler.eventStream()
            Task {
                for await event in events { if case .runStarted = event { await counter.count() } }
            }
            // The store's highest value after each commit, stamped when the observation saw it.
            let observation = ValueObservation.tracking { db in try Int.fetchOne(db, sql: "SELECT max(value) FROM events") ?? 0 }
            let (highest, feed) = AsyncStream.makeStream(of: (Int, ContinuousClock.Instant).self, bufferingPolicy: .bufferingNewest(1))
            let database = engine.store.database
            Task {
                do {
                    for try await value in observation.values(in: database, scheduling: .async(onQueue: DispatchQueue(label: "ferry.bench.live"))) {
                        feed.yield((value, .now))
                    }
                } catch {}
                feed.finish()
            }
            return Watcher(session: session, engine: engine, highest: highest, counter: counter)
        }

        /// When the store first held record `index` (values arrive in order, one writer).
        func waitUntilHolds(_ index: Int) async throws -> ContinuousClock.Instant {
            for await (value, at) in highest where value >= index { return at }
            throw CommandFailure("the watcher's store closed before it held record \(index)")
        }
    }

    /// Streams of many users, open and idle, each read by a task of its own.
    final class IdleStreams: Sendable {
        let tokens: [String]
        private let http: HTTPClient
        private let readers: [Task<Void, Never>]
        private let changes: [AsyncStream<ContinuousClock.Instant>]

        private init(http: HTTPClient, tokens: [String], readers: [Task<Void, Never>], changes: [AsyncStream<ContinuousClock.Instant>]) {
            self.http = http
            self.tokens = tokens
            self.readers = readers
            self.changes = changes
        }

        static func open(_ count: Int, run: String, authority: TokenAuthority, endpoint: URL) async throws -> IdleStreams {
            var pool = HTTPClient.Configuration()
            pool.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: count + 16)
            let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: pool)
            let transport = HTTPClientTransport(baseURL: endpoint, client: http)
            var tokens: [String] = []
            var readers: [Task<Void, Never>] = []
            var changes: [AsyncStream<ContinuousClock.Instant>] = []
            // The client must be shut down whatever happens: opening a stream can fail midway.
            do {
                for index in 0..<count {
                    let token = try await authority.issue(userID: "\(run)-idle-\(index)", ttl: .seconds(7200))
                    let stream = try await transport.openStream(
                        TransportRequest(
                            method: "GET",
                            path: Endpoint.events,
                            headers: ["Authorization": "Bearer \(token)", "Ferry-Client-ID": "idle"]
                        )
                    )
                    guard stream.status == 200 else { throw CommandFailure("stream \(index) answered \(stream.status)") }
                    let (heard, feed) = AsyncStream.makeStream(of: ContinuousClock.Instant.self)
                    readers.append(
                        Task {
                            do {
                                for try await event in ServerSentEvents(chunks: stream.body) where event == .event(name: "change", data: "{}") {
                                    feed.yield(.now)
                                }
                            } catch {}
                            feed.finish()
                        }
                    )
                    tokens.append(token)
                    changes.append(heard)
                }
            } catch {
                await IdleStreams(http: http, tokens: tokens, readers: readers, changes: changes).close()
                throw error
            }
            return IdleStreams(http: http, tokens: tokens, readers: readers, changes: changes)
        }

        /// When stream `index` next said `change`.
        func waitForChange(on index: Int) async throws -> ContinuousClock.Instant {
            for await heard in changes[index] { return heard }
            throw CommandFailure("idle stream \(index) ended")
        }

        func close() async {
            for reader in readers { reader.cancel() }
            for reader in readers { await reader.value }
            try? await http.shutdown()
        }
    }
}
