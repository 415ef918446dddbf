import ArgumentParser
import Ferry
import FerryProtocol
import FerryServer
import Foundation
import Logging

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure Ferry against its baselines: capture, drain, merge, sync, pull, relaunch, naive, launch, load, fairness, rules.",
        discussion: "Build with -c release for figures worth recording; BENCHMARKS.md says how they were taken."
    )

    /// How drain, merge, sync and pull's clients reach the server.
    enum Transport: String, CaseIterable, ExpressibleByArgument {
        /// AsyncHTTPClient, as the CLI talks.
        case nio
        /// `URLSessionTransport`, as apps do.
        case urlsession
    }

    /// The benchmarks, by name.
    enum Benchmark: String, CaseIterable {
        case capture, drain, merge, sync, pull, relaunch, naive, launch, load, fairness, spaces, live, attachments, rules
    }

    /// `--only`: benchmark names, comma-separated; a name it does not know is refused by
    /// `validate()`, which can say which one (the parser's own message cannot).
    struct Selection: ExpressibleByArgument {
        var benchmarks: [Benchmark]
        var unknown: [String]

        init?(argument: String) {
            let names = argument.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard !names.isEmpty else { return nil }
            benchmarks = names.compactMap(Benchmark.init(rawValue:))
            unknown = names.filter { Benchmark(rawValue: $0) == nil }
        }

        static var allValueStrings: [String] { Benchmark.allCases.map(\.rawValue) }
    }

    @Option(
        help:
            "Records for capture, drain, merge, sync, pull and relaunch; several, comma-separated (10000,100000,1000000), run each size in turn and end with a scaling table."
    )
    var records = "100000"
    @Option(
        help:
            "Keep the server's records for drain, merge, sync, pull and load in this PostgreSQL database (postgres://…) instead of SQLite files in a temporary folder."
    )
    var database: String?
    @Option(help: "drain, merge, sync, pull: records of other users (10,000 each) put in the server's storage first.") var otherRecords = 0
    @Option(
        help:
            "drain, merge, sync, pull: how clients reach the server: nio (AsyncHTTPClient, as the CLI talks) or urlsession (URLSessionTransport, as apps do)."
    )
    var transport = Transport.nio
    @Option(help: "load: ferry serve processes sharing the database, requests sent to each in turn.") var servers = 1
    @Option(help: "load: concurrent clients, five devices to a user, each pushing a batch of 50 then pulling.") var clients = 50
    @Option(help: "load: requests in all.") var requests = 20_000
    @Option(help: "load: spaces the clients share (every user a writer of each); 0: personal records only.") var spaces = 0
    @Option(help: "attachments: the large file's size in MB (1 to 10240).") var attachmentMB = 1024
    @Option(help: "attachments: photos of 2 MB sent at once.") var photos = 500
    @Option(
        help:
            "attachments: also through a server keeping them here (s3://BUCKET?endpoint=URL&region=R, keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)."
    )
    var attachments: String?
    @Option(help: "Run only these benchmarks, comma-separated.") var only: Selection?
    @Flag(help: "Print one JSON object instead of the table.") var json = false

    func validate() throws {
        if let name = only?.unknown.first {
            throw ValidationError(
                "--only: unknown benchmark '\(name)'; choose from \(Benchmark.allCases.map(\.rawValue).joined(separator: ", ")), comma-separated"
            )
        }
        _ = try sizes()
        guard (0...100_000_000).contains(otherRecords) else {
            throw ValidationError("--other-records must be from 0 to 100000000, got \(otherRecords)")
        }
        guard (1...16).contains(servers) else { throw ValidationError("--servers must be from 1 to 16, got \(servers)") }
        guard (1...1000).contains(clients) else { throw ValidationError("--clients must be from 1 to 1000, got \(clients)") }
        guard (1...10_000_000).contains(requests) else { throw ValidationError("--requests must be from 1 to 10000000, got \(requests)") }
        guard (0...1000).contains(spaces) else { throw ValidationError("--spaces must be from 0 to 1000, got \(spaces)") }
        guard (1...10_240).contains(attachmentMB) else { throw ValidationError("--attachment-mb must be from 1 to 10240, got \(attachmentMB)") }
        guard (1...10_000).contains(photos) else { throw ValidationError("--photos must be from 1 to 10000, got \(photos)") }
        if let attachments {
            guard case .s3 = try? BlobStoreURL(parsing: attachments) else {
                throw ValidationError("--attachments takes an s3://BUCKET?endpoint=URL&region=R URL (the folder store is always measured)")
            }
        }
        _ = try postgres()
    }

    /// The `--database` PostgreSQL location, if one is given.
    private func postgres() throws -> PostgresLocation? {
        guard let database else { return nil }
        guard case .postgres(let location) = try? DatabaseURL(parsing: database) else {
            throw ValidationError(
                "--database takes a postgres://USER:PASSWORD@HOST:PORT/DATABASE URL (without it, SQLite files are used), got '\(DatabaseURLError.masked(database))'"
            )
        }
        return location
    }

    /// The `--records` sizes, in the order given.
    private func sizes() throws -> [Int] {
        let sizes = records.split(separator: ",", omittingEmptySubsequences: false).map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ $0.map((1_000...1_000_000).contains) == true }) else {
            throw ValidationError("--records takes sizes from 1000 to 1000000, comma-separated (like 10000,100000), got '\(records)'")
        }
        return sizes.compactMap { $0 }
    }

    private var selected: [String] {
        (only?.benchmarks ?? Benchmark.allCases).map(\.rawValue)
    }

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .error
            return handler
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-bench-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: root) }
        ServerProcess.stopChildrenOnTermination { [root] in try? FileManager.default.removeItem(at: root) }
        let postgres = try postgres()
        let sizes = try sizes()
        var results: [BenchResult] = []
        var scaling: [(records: Int, results: [BenchResult])] = []
        let wanted = Set(selected)
        var benchmarks = Benchmarks(root: root, records: sizes[0], postgres: postgres, postgresURL: database, otherRecords: otherRecords)
        if transport == .urlsession { benchmarks.transport = { URLSessionTransport(baseURL: $0) } }
        for (index, size) in sizes.enumerated() {
            benchmarks.records = size
            benchmarks.root = root.appendingPathComponent("\(index + 1)-\(size)-records")
            var sized: [BenchResult] = []
            if wanted.contains("capture") { sized.append(try await report(benchmarks.capture())) }
            if !wanted.isDisjoint(with: ["drain", "merge", "sync", "pull", "relaunch"]) {
                for result in try await benchmarks.serverSide(wanted: wanted) { sized.append(report(result)) }
            }
            scaling.append((size, sized))
            results += sized
        }
        if sizes.count > 1, !json { report(scaling) }
        if wanted.contains("naive") { results.append(report(try await benchmarks.naive())) }
        if wanted.contains("launch") { results.append(report(try await benchmarks.launch())) }
        var load: LoadTest.Report?
        if wanted.contains("load") {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let target = postgres.map(DatabaseURL.postgres) ?? .sqlite(path: root.appendingPathComponent("load.sqlite").path)
            var test = LoadTest(database: target, servers: servers, clients: clients, requests: requests)
            test.spaces = spaces
            let result = try await test.run(in: root)
            if !json { report(result, of: test) }
            load = result
        }
        if wanted.contains("fairness") {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let target = postgres.map(DatabaseURL.postgres) ?? .sqlite(path: root.appendingPathComponent("fairness.sqlite").path)
            for honorsRetryAfter in [false, true] {
                let test = FairnessTest(database: target, honorsRetryAfter: honorsRetryAfter)
                let result = try await test.run(in: root)
                if !json { report(result, of: test) }
            }
            let shared = SpaceFairnessTest(database: target)
            let result = try await shared.run(in: root)
            if !json { report(result, of: shared) }
        }
        if wanted.contains("spaces") {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let target = postgres.map(DatabaseURL.postgres) ?? .sqlite(path: root.appendingPathComponent("spaces.sqlite").path)
            let report = try await SpacesBench(database: target, records: sizes[0]).run(in: root)
            if !json { for line in report { printNow(line) } }
        }
        if wanted.contains("live") {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let target = postgres.map(DatabaseURL.postgres) ?? .sqlite(path: root.appendingPathComponent("live.sqlite").path)
            let report = try await LiveBench(database: target).run(in: root)
            if !json { for line in report { printNow(line) } }
        }
        if wanted.contains("rules") {
            let report = try await RulesBench(postgres: postgres).run(in: root.appendingPathComponent("rules"))
            if !json { for line in report { printNow(line) } }
        }
        if wanted.contains("attachments") {
            var bench = AttachmentBench(transport: benchmarks.transport)
            bench.bytes = Int64(attachmentMB) * 1_000_000
            bench.photos = photos
            bench.stores = attachments.map { [$0] } ?? []
            let report = try await bench.run(in: root.appendingPathComponent("attachments"))
            if !json { for line in report { printNow(line) } }
        }
        if json { printNow(String(decoding: try ProtocolValidation.encode(document(results, load: load)), as: UTF8.self)) }
    }

    private func report(_ fairness: FairnessTest.Report, of test: FairnessTest) {
        func figures(_ latencies: [Double]) -> String {
            String(
                format: "p50 %.1f ms, p99 %.1f ms",
                FairnessTest.Report.percentile(0.5, of: latencies),
                FairnessTest.Report.percentile(0.99, of: latencies)
            )
        }
        printNow(
            "fairness: on \(test.database), one user sends \(test.attackingPushes) pushes of 3.75 MB and \(test.attackingPulls) pulls of 4 MiB pages at once, \(test.honorsRetryAfter ? "waiting Retry-After after a 429" : "without pause"), while another pushes one mutation \(test.probes) times"
        )
        printNow("  the other user's push idle:         " + figures(fairness.idle))
        printNow("  the other user's push under attack: " + figures(fairness.underAttack))
        let idleP99 = FairnessTest.Report.percentile(0.99, of: fairness.idle)
        printNow(
            String(
                format: "  → p99 under attack is %.1fx idle's",
                FairnessTest.Report.percentile(0.99, of: fairness.underAttack) / max(idleP99, 0.001)
            )
        )
        printNow(
            "  the attacker's answers: "
                + fairness.attackStatuses.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key == 0 ? "failed" : "\($0.key)")" }.joined(
                    separator: ", "
                )
        )
        printNow(
            String(
                format: "  server resident memory: %.0f MiB before, %.0f MiB at its peak under attack, %.0f MiB after",
                fairness.memoryBefore,
                fairness.memoryPeak,
                fairness.memoryAfter
            )
        )
    }

    private func report(_ fairness: SpaceFairnessTest.Report, of test: SpaceFairnessTest) {
        func figures(_ idle: [Double], _ loaded: [Double]) -> String {
            let p99 = (FairnessTest.Report.percentile(0.99, of: idle), FairnessTest.Report.percentile(0.99, of: loaded))
            return String(
                format: "idle p50 %.1f / p99 %.1f ms, under load p50 %.1f / p99 %.1f ms (p99 %.1fx idle's)",
                FairnessTest.Report.percentile(0.5, of: idle),
                p99.0,
                FairnessTest.Report.percentile(0.5, of: loaded),
                p99.1,
                p99.1 / max(p99.0, 0.001)
            )
        }
        printNow(
            "fairness in a shared space: on \(test.database), one member keeps \(test.downloads) full downloads of a space of \(test.records) records of 250 KiB in flight, \(test.streams) live streams and pushes under \(test.clientIDs) client ids, waiting Retry-After after a 429; another member pushes one change and pulls it, \(test.probes) times"
        )
        printNow("  the other member's push: " + figures(fairness.pushIdle, fairness.pushUnderLoad))
        printNow("  the other member's pull: " + figures(fairness.pullIdle, fairness.pullUnderLoad))
        printNow(
            "  the heavy member: \(fairness.downloadsFinished) whole downloads; answers "
                + fairness.heavyStatuses.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key == 0 ? "failed" : "\($0.key)")" }.joined(
                    separator: ", "
                )
        )
        printNow(String(format: "  server resident memory at its peak under load: %.0f MiB", fairness.memoryPeak))
    }

    /// Prints a result as it arrives (a long run shows progress), unless `--json`.
    private func report(_ result: BenchResult) -> BenchResult {
        guard !json else { return result }
        printNow("\(result.name): \(result.what)")
        printNow("  Ferry     " + line(result.ferry))
        printNow("  baseline  " + line(result.baseline) + "  (\(result.baselineName))")
        printNow("  → \(result.comparison)")
        return result
    }

    /// Each benchmark's time at every size beside its floor's, and how much each size cost over
    /// the one before it against how much more work it was.
    private func report(_ scaling: [(records: Int, results: [BenchResult])]) {
        printNow("")
        printNow("| benchmark | records | Ferry | rate | floor | vs floor | time vs the size before (work: ×) |")
        printNow("| --- | --- | --- | --- | --- | --- | --- |")
        for name in Benchmark.allCases.map(\.rawValue) {
            var previous: (records: Int, seconds: Double)?
            for (records, results) in scaling {
                guard let result = results.first(where: { $0.name == name }) else { continue }
                let growth =
                    previous.map { String(format: "%.1fx (%.0fx)", result.ferry.seconds / $0.seconds, Double(records) / Double($0.records)) } ?? ""
                let figures = String(
                    format: "%.2f s | %.0f/s | %.2f s | %.2fx",
                    result.ferry.seconds,
                    result.ferry.throughput,
                    result.baseline.seconds,
                    result.ferry.seconds / result.baseline.seconds
                )
                printNow("| \(name) | \(records.formatted()) | \(figures) | \(growth) |")
                previous = (records, result.ferry.seconds)
            }
        }
    }

    private func report(_ load: LoadTest.Report, of test: LoadTest) {
        printNow(
            "load: \(test.servers) ferry serve process\(test.servers == 1 ? "" : "es") on \(test.database), \(test.clients) clients, \(load.requests.formatted()) requests (push \(test.batchSize) mutations, then pull)"
                + (test.spaces > 0 ? ", records in \(test.spaces) shared spaces" : "")
        )
        printNow(
            String(
                format: "  %.0f requests/s, %.0f mutations/s, p50 %.1f ms, p99 %.1f ms, %d errors in %.1f s",
                Double(load.requests) / load.seconds,
                Double(load.mutations) / load.seconds,
                load.percentile(0.5),
                load.percentile(0.99),
                load.errors,
                load.seconds
            )
        )
        for (index, memory) in load.memory.enumerated() {
            printNow(
                String(
                    format: "  server %d resident memory: %.0f MiB at start, %.0f halfway, %.0f at the end",
                    index + 1,
                    memory.start,
                    memory.halfway,
                    memory.end
                )
            )
        }
        if let error = load.firstError { printNow("  first error: \(error)") }
    }

    private func line(_ m: BenchMeasurement) -> String {
        var parts = [String(format: "%.2f s", m.seconds), String(format: "%.0f /s", m.throughput)]
        if let requests = m.requests { parts.append("\(requests) requests") }
        if let simulated = m.simulatedSeconds { parts.append(String(format: "%.0f s simulated", simulated)) }
        if let peak = m.peakMemoryMB { parts.append(String(format: "peak %.0f MB", peak)) }
        if let peak = m.serverPeakMemoryMB { parts.append(String(format: "server peak %.0f MB", peak)) }
        parts += m.extra.map { "\($0.key) \($0.value)" }
        return parts.joined(separator: ", ")
    }

    private func document(_ results: [BenchResult], load: LoadTest.Report?) -> JSONObject {
        func object(_ m: BenchMeasurement) -> JSONValue {
            var fields: JSONObject = ["seconds": .number(m.seconds), "items": .integer(Int64(m.items)), "perSecond": .number(m.throughput)]
            if let requests = m.requests { fields["requests"] = .integer(Int64(requests)) }
            if let simulated = m.simulatedSeconds { fields["simulatedSeconds"] = .number(simulated) }
            if let peak = m.peakMemoryMB { fields["peakMemoryMB"] = .number(peak) }
            if let peak = m.serverPeakMemoryMB { fields["serverPeakMemoryMB"] = .number(peak) }
            for (key, value) in m.extra { fields[key] = .integer(Int64(value)) }
            return .object(fields)
        }
        var document: JSONObject = [
            "machine": .object([
                "cores": .integer(Int64(ProcessInfo.processInfo.activeProcessorCount)),
                "memoryGB": .number(Double(ProcessInfo.processInfo.physicalMemory) / 1_073_741_824),
            ]),
            "benchmarks": .array(
                results.map {
                    .object([
                        "name": .string($0.name), "what": .string($0.what), "ferry": object($0.ferry), "baselineName": .string($0.baselineName),
                        "baseline": object($0.baseline), "comparison": .string($0.comparison),
                    ])
                }
            ),
        ]
        if let load {
            document["load"] = .object([
                "seconds": .number(load.seconds), "requests": .integer(Int64(load.requests)), "mutations": .integer(Int64(load.mutations)),
                "errors": .integer(Int64(load.errors)), "p50ms": .number(load.percentile(0.5)), "p99ms": .number(load.percentile(0.99)),
                "serverMemoryMB": .array(load.memory.map { .array([.number($0.start), .number($0.halfway), .number($0.end)]) }),
            ])
        }
        return document
    }
}
