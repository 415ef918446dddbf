import Foundation

/// One side of a benchmark: what it did, how long it took, and peak memory meanwhile.
struct BenchMeasurement: Sendable {
    var seconds: Double
    /// Records, mutations or writes handled.
    var items: Int
    var requests: Int?
    /// Simulated time (a virtual clock), where the benchmark waits on rate limits.
    var simulatedSeconds: Double?
    /// This process's peak resident memory.
    var peakMemoryMB: Double?
    /// The `ferry serve` process's peak resident memory, where a server process took part.
    var serverPeakMemoryMB: Double?
    /// Anything else worth a number: runs, records processed.
    var extra: KeyValuePairs<String, Int> = [:]

    var throughput: Double { seconds > 0 ? Double(items) / seconds : 0 }

    /// The measurement of median time among several rounds of the same work.
    static func median(_ rounds: [BenchMeasurement]) -> BenchMeasurement {
        rounds.sorted { $0.seconds < $1.seconds }[rounds.count / 2]
    }

    /// Times `body`, with the peak resident set reset before it so the figure is this body's.
    static func measure(items: Int, _ body: () async throws -> (requests: Int?, simulated: Double?)) async throws -> BenchMeasurement {
        PeakMemory.reset()
        let start = ContinuousClock.now
        let (requests, simulated) = try await body()
        return BenchMeasurement(
            seconds: (ContinuousClock.now - start).seconds,
            items: items,
            requests: requests,
            simulatedSeconds: simulated,
            peakMemoryMB: PeakMemory.megabytes()
        )
    }
}

/// Peak resident set size (Linux: VmHWM, resettable through /proc/PID/clear_refs), of this
/// process or of a child.
enum PeakMemory {
    static func reset(of process: String = "self") {
        guard let file = FileHandle(forWritingAtPath: "/proc/\(process)/clear_refs") else { return }
        try? file.write(contentsOf: Data("5".utf8))
        try? file.close()
    }

    static func megabytes(field: String = "VmHWM", of process: String = "self") -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
            let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
        else { return nil }
        return kilobytes / 1024
    }
}
