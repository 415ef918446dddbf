import Foundation

/// A `ferry` process, the built executable, whose output goes to a file: for tests that run
/// the command line for real and kill it.
public final class FerryProcess {
    /// The `ferry` executable beside the test bundle (`swift build` puts both in one folder).
    public static var binary: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("ferry")
    }

    public let process = Process()
    public let output: URL

    /// Runs `executable` (`ferry` unless given, or another executable of the package beside it)
    /// with `arguments`, and `environment` added to this process's.
    public init(_ arguments: [String], in directory: URL, executable: String = "ferry", environment: [String: String] = [:]) throws {
        output = directory.appendingPathComponent("output-\(UUID().uuidString.prefix(8)).log")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        process.executableURL = Self.binary.deletingLastPathComponent().appendingPathComponent(executable)
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = process.standardOutput
        try process.run()
    }

    public var text: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    /// Waits for a line of the server's output saying where it listens (`ferry serve`'s unless
    /// `announcement` names another's); its port.
    public func listeningPort(announcement: String = "Ferry server listening on http://") async throws -> Int {
        while process.isRunning {
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix(announcement) }),
                let port = line.dropFirst(announcement.count).split(separator: " ")[0].split(separator: ":").last.flatMap({ Int($0) })
            {
                return port
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("\(process.executableURL?.lastPathComponent ?? "the server") ended: \(text)")
    }

    public func killHard() async {
        kill(process.processIdentifier, SIGKILL)
        let ended = process
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                ended.waitUntilExit()
                continuation.resume()
            }
        }
    }
}

extension FerryProcess {
    /// What a `ferry` run printed and how it ended.
    public struct Run: Sendable {
        public var status: Int32
        public var output: String
        public var error: String
    }

    /// Runs the `ferry` executable to its end. The blocking reads and wait happen on a
    /// dispatch queue of their own: on a Swift concurrency thread they could starve a server in
    /// this process that the binary is talking to.
    public static func run(_ arguments: [String]) async throws -> Run {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: "ferry-process.run").async {
                continuation.resume(with: Result { try runToEnd(arguments) })
            }
        }
    }

    private static func runToEnd(_ arguments: [String]) throws -> Run {
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        let output = Pipe()
        let error = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = error
        try process.run()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, output: String(decoding: out, as: UTF8.self), error: String(decoding: err, as: UTF8.self))
    }
}
