import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry client attach`: takes a file into the store, prints its digest.
struct ClientAttachCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attach",
        abstract: "Take a file into the store as an attachment and print its digest.",
        discussion: """
            Write the digest in a record's "photo" or "attachment" field (ferry client add --data \
            '{"photo":"sha256:…"}'): the next sync uploads the bytes before the record.
            """
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "The file to attach.") var file: String
    @Option(help: "Its media type, like image/jpeg.") var contentType: String?

    func validate() throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw ValidationError("--file \(file) is not a file; nothing was attached")
        }
    }

    func run() async throws {
        let store = try options.open()
        do {
            printNow(try await store.attach(fileAt: URL(fileURLWithPath: file), contentType: contentType))
        } catch let error as FerryError {
            throw CommandFailure("\(error)")
        }
    }
}

/// `ferry client fetch`: an attachment's bytes into a file, downloaded first if the store lacks them.
struct ClientFetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Write an attachment's bytes to a file, downloading them first if the store does not hold them."
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "The server's base URL, like http://127.0.0.1:8080.") var server: String
    @Option(help: "A token for --user.") var token: String
    @Option(help: "The file to write; it must not exist.") var out: String
    @Argument(help: "The attachment's digest: sha256: and 64 lowercase hex digits.") var digest: String

    func validate() throws {
        _ = try checkedServer(server, token: token, user: options.user)
        guard AttachmentDigest(digest) != nil else { throw ValidationError(AttachmentDigest.problem(with: digest)) }
        guard !FileManager.default.fileExists(atPath: out) else { throw ValidationError("--out \(out) exists; name a new file") }
    }

    func run() async throws {
        let url = try checkedServer(server, token: token, user: options.user)
        let store = try options.open()
        let token = self.token
        let client = FerryClient(store: store, transport: HTTPClientTransport(baseURL: url), token: { token })
        do {
            let file = try await client.attachment(digest)
            // Through a temporary file and a rename: a fetch killed mid-copy never leaves part of it at --out.
            let partial = URL(fileURLWithPath: out + ".ferry-\(UUID().uuidString.prefix(8)).part")
            defer { try? FileManager.default.removeItem(at: partial) }
            try FileManager.default.copyItem(at: file, to: partial)
            let copied = try FileHandle(forReadingFrom: partial)
            try copied.synchronize()  // on the disk before it is named
            try copied.close()
            try FileManager.default.moveItem(at: partial, to: URL(fileURLWithPath: out))
        } catch let error as FerryError {
            throw CommandFailure("\(error)")
        } catch let error as CocoaError {
            throw CommandFailure("cannot write --out \(out): \(error.localizedDescription)")
        }
        printNow(out)
    }
}
