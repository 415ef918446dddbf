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

    public init(_ arguments: [String], in directory: URL) throws {
        output = directory.appendingPathComponent("output-\(UUID().uuidString.prefix(8)).log")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        process.executableURL = Self.binary
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = process.standardOutput
        try process.run()
    }

    public var text: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    /// Waits for a line of `ferry serve`'s output saying where it listens; its port.
    public func listeningPort() async throws -> Int {
        while process.isRunning {
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Ferry server listening on http://") }),
                let port = line.split(separator: " ")[4].split(separator: ":").last.flatMap({ Int($0) })
            {
                return port
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("ferry serve ended: \(text)")
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
