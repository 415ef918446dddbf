import ArgumentParser
import Ferry
import FerryServer
import Foundation
import GRDB

/// `ferry client watch`: a store kept live from a terminal, as an app's session keeps it.
struct ClientWatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Keep a store live: pull on every change the server announces, push what any process writes to the store.",
        discussion: """
            Holds the server's event stream open and syncs through a session, as an app does: each change \
            another device makes starts a run at once, and changes written to the store by this or any \
            other process (ferry client add, another app) are noticed within a second and pushed. Prints \
            one line per run. SIGINT or SIGTERM stops it after the run in progress, with exit status 0.
            """
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "The server's base URL, like http://127.0.0.1:8080.") var server: String
    @Option(help: "A token for --user.") var token: String

    func validate() throws {
        _ = try checkedServer(server, token: token, user: options.user)
    }

    func run() async throws {
        let stops = Self.stopSignals()
        try await options.open().close()  // checks --store and --user, and migrates, before anything is sent
        var configuration = SessionConfiguration(
            storeDirectory: URL(fileURLWithPath: options.store, isDirectory: true),
            tables: [StoreOptions.records],
            schema: StoreOptions.schema
        )
        configuration.otherProcessCheckInterval = .seconds(1)
        let token = self.token
        let session = SyncSession(
            configuration: configuration,
            transport: HTTPClientTransport(baseURL: try checkedServer(server, token: token, user: options.user)),
            token: { _ in token }
        )
        try await session.signIn(options.user)
        guard let engine = await session.engine else { throw CommandFailure("could not sign in \(options.user)") }
        let printer = Task { await Self.printRuns(of: engine) }
        printNow("watching \(options.user) at \(server); SIGINT or SIGTERM stops after the run in progress")

        for await _ in stops { break }
        printNow("stopping after the run in progress")
        await session.setActive(false)  // no stream, no periodic run: nothing new starts by itself
        while case .running = await engine.scheduler.state { try? await Task.sleep(for: .milliseconds(20)) }
        try await session.signOut()
        await printer.value
    }

    /// One line per run, when it ends: its number, what asked for it, how it went, and the store after it.
    private static func printRuns(of engine: SyncSession.Engine) async {
        var triggers: [Int: [SyncTrigger]] = [:]
        var started: [Int: ContinuousClock.Instant] = [:]
        for await event in await engine.scheduler.eventStream() {
            switch event {
            case .trigger(let trigger, .startedRun(let run)), .trigger(let trigger, .coalescedIntoRun(let run)):
                triggers[run, default: []].append(trigger)
            case .runStarted(let run, _):
                started[run] = .now
            case .runFinished(let run, let succeeded):
                let milliseconds = started.removeValue(forKey: run).map { Int($0.duration(to: .now).milliseconds) } ?? 0
                let status = await engine.client.status
                let records = (try? await engine.store.database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM records") }) ?? 0
                let outcome = succeeded ? "synced" : "failed (\(status.lastError?.description ?? "unknown error"))"
                printNow(
                    "run \(run) (\(describe(triggers.removeValue(forKey: run) ?? []))) \(outcome) in \(milliseconds) ms: "
                        + "\(records) records, \(status.pending) pending, \(status.deadLettered) dead-lettered"
                )
            default:
                break
            }
        }
    }

    /// `serverChange ×3, localChange`.
    private static func describe(_ triggers: [SyncTrigger]) -> String {
        var counts: [(SyncTrigger, Int)] = []
        for trigger in triggers {
            if let index = counts.firstIndex(where: { $0.0 == trigger }) { counts[index].1 += 1 } else { counts.append((trigger, 1)) }
        }
        return counts.map { $0.1 == 1 ? $0.0.rawValue : "\($0.0.rawValue) ×\($0.1)" }.joined(separator: ", ")
    }

    /// SIGINT and SIGTERM, as a stream: the default action (ending the process at once) is off
    /// for the rest of the process's life.
    private static func stopSignals() -> AsyncStream<Int32> {
        let (signals, continuation) = AsyncStream.makeStream(of: Int32.self)
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                _ = source  // the handler keeps its source alive
                continuation.yield(number)
            }
            source.resume()
        }
        return signals
    }
}
