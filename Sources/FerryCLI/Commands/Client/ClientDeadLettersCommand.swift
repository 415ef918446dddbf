import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry client dead-letters`: the changes set aside with why, and the two ways out of the list.
struct ClientDeadLettersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dead-letters",
        abstract: "The changes set aside as dead letters, with why; --retry queues them again, --discard drops them.",
        discussion: """
            Safe while the app or another `ferry client sync` syncs the store: each action is one transaction, like a \
            local write. --retry drops a dead letter that a later change of its record supersedes.
            """
    )

    @OptionGroup var options: StoreOptions
    @Flag(help: "Queue every dead letter again, to be sent by the next sync.") var retry = false
    @Flag(help: "Drop every dead letter: never sent; the local rows stay as they are.") var discard = false
    @Flag(help: "Print JSON lines.") var json = false

    func validate() throws {
        if retry && discard { throw ValidationError("--retry and --discard exclude each other; pick one") }
    }

    func run() async throws {
        let store = try options.open()
        let client = FerryClient(store: store, transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1")!), token: { "" })
        if retry {
            printNow("queued \(try await client.retryDeadLetters()) dead letters again")
        } else if discard {
            printNow("discarded \(try await client.discardDeadLetters()) dead letters")
        } else {
            for letter in try await client.deadLetters() {
                if json {
                    let line: JSONObject = [
                        "id": .integer(letter.id), "entity": .string(letter.entity), "entityID": .string(letter.entityID),
                        "op": .string(letter.op.rawValue), "reason": .string(letter.reason),
                    ]
                    printNow(String(decoding: try ProtocolValidation.encode(line), as: UTF8.self))
                } else {
                    printNow("\(letter.id)\t\(letter.op.rawValue) \(letter.entity)/\(letter.entityID)\t\(letter.reason)")
                }
            }
        }
        try await store.close()
    }
}
