import ArgumentParser
import Foundation

@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Ferry: an offline-first sync engine. Runs the reference server, issues tokens, and drives a client store.",
        subcommands: [ServeCommand.self, TokenCommand.self, ClientCommand.self, DemoCommand.self, BenchCommand.self]
    )
}

/// A refusal the user can act on: printed as one line, exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Prints a line unbuffered, so a script reading our output through a pipe sees it at once.
func printNow(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
