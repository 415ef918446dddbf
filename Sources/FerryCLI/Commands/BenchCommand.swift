import ArgumentParser
import Ferry
import FerryProtocol
import Foundation
import Logging

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure Ferry against its baselines in one process run: capture, drain, sync, naive, launch.",
        discussion: "Build with -c release for figures worth recording; BENCHMARKS.md says how they were taken."
    )

    static let names = ["capture", "drain", "sync", "naive", "launch"]

    @Option(help: "Records for capture, drain and sync.") var records = 100_000
    @Option(help: "Run only these benchmarks, comma-separated: \(Self.names.joined(separator: ", ")).") var only: String?
    @Flag(help: "Print one JSON object instead of the table.") var json = false

    func validate() throws {
        guard (1_000...1_000_000).contains(records) else { throw ValidationError("--records must be from 1000 to 1000000, got \(records)") }
        for name in selected where !Self.names.contains(name) {
            throw ValidationError("unknown benchmark '\(name)'; choose from \(Self.names.joined(separator: ", "))")
        }
    }

    private var selected: [String] {
        only.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? Self.names
    }

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .error
            return handler
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-bench-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: root) }
        let benchmarks = Benchmarks(root: root, records: records)
        var results: [BenchResult] = []
        let wanted = Set(selected)
        if wanted.contains("capture") { results.append(try await report(benchmarks.capture())) }
        if !wanted.isDisjoint(with: ["drain", "sync"]) {
            for result in try await benchmarks.drainAndSync() where wanted.contains(result.name) { results.append(report(result)) }
        }
        if wanted.contains("naive") { results.append(report(try await benchmarks.naive())) }
        if wanted.contains("launch") { results.append(report(try await benchmarks.launch())) }
        if json { printNow(String(decoding: try ProtocolValidation.encode(document(results)), as: UTF8.self)) }
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

    private func line(_ m: BenchMeasurement) -> String {
        var parts = [String(format: "%.2f s", m.seconds), String(format: "%.0f /s", m.throughput)]
        if let requests = m.requests { parts.append("\(requests) requests") }
        if let simulated = m.simulatedSeconds { parts.append(String(format: "%.0f s simulated", simulated)) }
        if let peak = m.peakMemoryMB { parts.append(String(format: "peak %.0f MB", peak)) }
        parts += m.extra.map { "\($0.key) \($0.value)" }
        return parts.joined(separator: ", ")
    }

    private func document(_ results: [BenchResult]) -> JSONObject {
        func object(_ m: BenchMeasurement) -> JSONValue {
            var fields: JSONObject = ["seconds": .number(m.seconds), "items": .integer(Int64(m.items)), "perSecond": .number(m.throughput)]
            if let requests = m.requests { fields["requests"] = .integer(Int64(requests)) }
            if let simulated = m.simulatedSeconds { fields["simulatedSeconds"] = .number(simulated) }
            if let peak = m.peakMemoryMB { fields["peakMemoryMB"] = .number(peak) }
            for (key, value) in m.extra { fields[key] = .integer(Int64(value)) }
            return .object(fields)
        }
        return [
            "machine": .object(["cores": .integer(Int64(ProcessInfo.processInfo.activeProcessorCount)),
                                "memoryGB": .number(Double(ProcessInfo.processInfo.physicalMemory) / 1_073_741_824)]),
            "benchmarks": .array(results.map {
                .object(["name": .string($0.name), "what": .string($0.what), "ferry": object($0.ferry), "baselineName": .string($0.baselineName),
                         "baseline": object($0.baseline), "comparison": .string($0.comparison)])
            }),
        ]
    }
}
