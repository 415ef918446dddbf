import ArgumentParser
import Ferry
import FerryProtocol
import FerryServer
import Foundation

struct ClientSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Push everything pending, then pull until caught up.",
        discussion: "Exits 0 only when nothing is left pending except dead-lettered entries."
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "The server's base URL, like http://127.0.0.1:8080.") var server: String
    @Option(help: "A token for --user.") var token: String
    @Option(help: "Give up after this many seconds.") var timeout = 300
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        _ = try checkedServer(server, token: token, user: options.user)
        guard timeout > 0 else { throw ValidationError("--timeout must be a positive number of seconds") }
    }

    func run() async throws {
        let url = try checkedServer(server, token: token, user: options.user)
        let store = try options.open()
        let token = self.token
        let client = FerryClient(store: store, transport: HTTPClientTransport(baseURL: url), token: { token })
        let progress = ProgressPrinter(live: !json && isatty(STDOUT_FILENO) == 1)
        let watcher = Task {
            for await status in await client.statusUpdates() where !json { progress.show(status) }
        }
        let deadline = ContinuousClock.now + .seconds(timeout)
        var report = SyncReport()
        var lastError: (any Error)?
        // The client retries within a run; across runs, keep going until the deadline.
        while ContinuousClock.now < deadline {
            do {
                report = try await withTimeLimit(ContinuousClock.now.duration(to: deadline), clock: ContinuousClock(), awaitingCancelledWork: true) {
                    try await client.sync()
                }
                lastError = nil
                break
            } catch let error as FerryError where error.code == .unauthorized {
                let why = error.message
                watcher.cancel()
                throw CommandFailure("the server refused the token: \(why)")
            } catch {
                lastError = error
                if error is TimeLimitExceeded { break }
                try? await Task.sleep(for: .seconds(1))
            }
        }
        watcher.cancel()
        progress.finish()
        let status = await client.status
        if json {
            let output: [String: JSONValue] = [
                "pending": .integer(Int64(status.pending)), "deadLettered": .integer(Int64(status.deadLettered)),
                "pushed": .integer(Int64(report.upload.acknowledged)), "merged": .integer(Int64(report.upload.merged)),
                "pulled": .integer(Int64(report.pull.received)), "requests": .integer(Int64(report.requests)),
                "rateLimited": .integer(Int64(report.rateLimited)),
                "error": lastError.map { .string("\($0)") } ?? .null,
            ]
            printNow(String(decoding: try ProtocolValidation.encode(output), as: UTF8.self))
        } else {
            printNow(
                "pushed \(report.upload.acknowledged), merged \(report.upload.merged), pulled \(report.pull.received), \(status.pending) pending, \(status.deadLettered) dead-lettered"
            )
        }
        if let lastError { throw CommandFailure("sync did not finish: \(lastError)") }
        if status.pending > 0 { throw ExitCode(1) }
    }
}
