import Foundation
import NIOConcurrencyHelpers

/// A `ferry serve` child process of this same executable, its output in a log file.
final class ServerProcess: Sendable {
    private let process: Process
    private let log: URL
    /// Children running, by process id, for `stopChildrenOnTermination`.
    private static let running = NIOLockedValueBox<Set<Int32>>([])

    init(arguments: [String], log: URL) throws {
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = Bundle.main.executableURL
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: log)
        process.standardError = process.standardOutput
        try process.run()
        Self.running.withLockedValue { _ = $0.insert(process.processIdentifier) }
        self.process = process
        self.log = log
    }

    /// When this process is told to end (SIGTERM, SIGINT), stops every child still running
    /// and runs `cleanup` before exiting: `defer` blocks do not run then, and a CI job
    /// cancelled mid-benchmark would leave its `ferry serve` processes behind.
    static func stopChildrenOnTermination(then cleanup: @escaping @Sendable () -> Void) {
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                _ = source  // the handler keeps its source alive for the life of the process
                for child in running.withLockedValue({ $0 }) { kill(child, SIGTERM) }
                cleanup()
                exit(128 + signalNumber)
            }
            source.resume()
        }
    }

    /// Waits for the line saying where it listens.
    func port() async throws -> Int {
        while process.isRunning {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Ferry server listening on http://") }),
                let port = line.split(separator: " ")[4].split(separator: ":").last.flatMap({ Int($0) })
            {
                return port
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw CommandFailure("ferry serve ended before listening: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
    }

    /// Resident memory in MiB (Linux's VmRSS; 0 where /proc is missing).
    var residentMB: Double { PeakMemory.megabytes(field: "VmRSS", of: "\(process.processIdentifier)") ?? 0 }

    /// The most resident memory since `resetPeakMemory()`, in MiB (Linux's VmHWM).
    var peakMemoryMB: Double? { PeakMemory.megabytes(of: "\(process.processIdentifier)") }

    func resetPeakMemory() { PeakMemory.reset(of: "\(process.processIdentifier)") }

    /// CPU time used so far, user and system, in seconds (Linux's /proc/PID/stat; 0 where it is missing).
    var cpuSeconds: Double {
        guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return 0 }
        // After "pid (name)": state is field 3, utime and stime are fields 14 and 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
        Self.running.withLockedValue { _ = $0.remove(process.processIdentifier) }
    }
}
