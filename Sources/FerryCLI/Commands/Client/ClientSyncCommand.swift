import ArgumentParser
import Ferry
import FerryProtocol
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

    func run() async throws {
        guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw CommandFailure("--server '\(server)' is not an http(s) URL like http://127.0.0.1:8080")
        }
        guard timeout > 0 else { throw CommandFailure("--timeout must be a positive number of seconds") }
        let subject = try TokenSubject.read(from: token)
        guard subject == options.user else {
            throw CommandFailure("the token is for user '\(subject)', not '\(options.user)'; nothing was sent")
        }
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
                report = try await withDeadline(deadline) { try await client.sync() }
                lastError = nil
                break
            } catch FerryError.unauthorized(let why) {
                watcher.cancel()
                throw CommandFailure("the server refused the token: \(why)")
            } catch {
                lastError = error
                if error is DeadlineExceeded { break }
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
            printNow("pushed \(report.upload.acknowledged), merged \(report.upload.merged), pulled \(report.pull.received), \(status.pending) pending, \(status.deadLettered) dead-lettered")
        }
        if let lastError { throw CommandFailure("sync did not finish: \(lastError)") }
        if status.pending > 0 { throw ExitCode(1) }
    }
}

struct DeadlineExceeded: Error, CustomStringConvertible {
    var description: String { "timed out" }
}

/// Runs `body`, cancelling it at `deadline`.
func withDeadline<T: Sendable>(_ deadline: ContinuousClock.Instant, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(until: deadline)
            throw DeadlineExceeded()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// Reads a JWT's `sub` without verifying it: only to refuse a token meant for another user.
enum TokenSubject {
    static func read(from token: String) throws -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw CommandFailure("--token is not a JWT (three dot-separated parts)") }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64),
            let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let subject = claims["sub"] as? String
        else { throw CommandFailure("--token has no readable sub claim") }
        return subject
    }
}
