import ArgumentParser
import FerryServeCommand

/// `ferry-server`: the executable to deploy. It links the server and its one command, and
/// nothing of what `ferry demo` and `ferry bench` need (the in-process test server, the
/// fault-injecting transports, the client library): what runs in production carries no test
/// doubles. `ferry-server` and `ferry-server serve` take `ferry serve`'s flags; `ferry-server
/// token` is `ferry token`, for operators.
@main
struct FerryServerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferry-server",
        abstract: "Ferry's reference sync server, as deployed: `ferry serve` without the developer's tools.",
        subcommands: [ServeCommand.self, TokenCommand.self],
        defaultSubcommand: ServeCommand.self
    )

    static func main() async {
        MallocArenas.limitToCores()
        await main(nil)
    }
}
