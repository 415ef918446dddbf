import ArgumentParser
import Foundation

@main
struct Ferry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Ferry: an offline-first sync engine. Runs the reference server, issues tokens, and drives a client store.",
        subcommands: [ServeCommand.self, TokenCommand.self, ClientCommand.self, SpaceCommand.self, DemoCommand.self, BenchCommand.self]
    )

    static func main() async {
        MallocArenas.limitToCores()
        await main(nil)
    }
}

/// Refuses, before any work, a page path that is empty or whose folder does not exist.
func validatePagePath(_ path: String, option: String) throws {
    guard !path.isEmpty else { throw ValidationError("\(option) needs a file name") }
    var isDirectory: ObjCBool = false
    let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
    guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
        throw ValidationError("\(option) \(path): the folder \(folder) does not exist")
    }
}

/// Writes a report page whole or not at all, with a message that says why it could not.
func writePage(_ page: String, to path: String) throws {
    do {
        try Data(page.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    } catch {
        throw CommandFailure("cannot write \(path): \(error.localizedDescription)")
    }
}
