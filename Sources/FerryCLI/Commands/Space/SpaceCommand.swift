import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

struct SpaceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "space",
        abstract: "Manage shared spaces on a server: create, delete, list, members, grant, revoke.",
        discussion: "Each request goes to --server with --token (a user's token, or a service token from `ferry token --admin`).",
        subcommands: [
            SpaceCreateCommand.self, SpaceDeleteCommand.self, SpaceListCommand.self, SpaceMembersCommand.self, SpaceGrantCommand.self,
            SpaceRevokeCommand.self,
        ]
    )
}

extension SpaceRole: ExpressibleByArgument {}

/// `--server URL --token T`, shared by every space command, and the requests they send.
struct ServerOptions: ParsableArguments {
    @Option(help: "The server's base URL, like http://127.0.0.1:8080.")
    var server: String

    @Option(help: "A bearer token; falls back to FERRY_TOKEN.")
    var token: String?

    func validate() throws {
        guard let url = URL(string: server), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ValidationError("--server must be an http or https URL, like http://127.0.0.1:8080; got '\(server)'")
        }
        guard bearer != nil else { throw ValidationError("no token: pass --token T or set FERRY_TOKEN") }
    }

    private var bearer: String? {
        let token = token ?? ProcessInfo.processInfo.environment["FERRY_TOKEN"]
        return token?.isEmpty == false ? token : nil
    }

    /// Sends one request; a refusal is a `CommandFailure` with the server's code and message.
    func send(_ method: String, _ path: String, body: Data? = nil) async throws -> Data {
        let transport = URLSessionTransport(baseURL: URL(string: server)!)
        var headers = ["Authorization": "Bearer \(bearer ?? "")"]
        if body != nil { headers["Content-Type"] = "application/json" }
        let response: TransportResponse
        do {
            response = try await transport.send(TransportRequest(method: method, path: path, headers: headers, body: body))
        } catch {
            throw CommandFailure("cannot reach \(server): \(error)")
        }
        guard (200..<300).contains(response.status) else {
            let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body)
            throw CommandFailure(
                "the server refused (\(response.status) \(envelope?.error.code ?? "error")): \(envelope?.error.message ?? String(decoding: response.body.prefix(200), as: UTF8.self))"
            )
        }
        return response.body
    }
}

/// A path of `Endpoint` for arguments, refused before any request when invalid.
func endpointPath(_ endpoint: Result<String, EndpointProblem>) throws -> String {
    try endpoint.mapError { ValidationError($0.message) }.get()
}

func spacePath(_ space: String) throws -> String { try endpointPath(Endpoint.space(space)) }

func memberPath(_ space: String, _ user: String) throws -> String { try endpointPath(Endpoint.member(user, of: space)) }

struct SpaceCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "create", abstract: "Create a space; you become its admin.")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The space id: 1 to 64 of a-z 0-9 _ -, starting with a letter or digit.") var space: String

    func validate() throws { _ = try spacePath(space) }

    func run() async throws {
        let membership = try JSONDecoder().decode(Membership.self, from: try await server.send("PUT", try spacePath(space)))
        printNow("space \(membership.space): \(membership.role.rawValue)")
    }
}

struct SpaceDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a space and its records (admins).")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The space id.") var space: String

    func validate() throws { _ = try spacePath(space) }

    func run() async throws {
        _ = try await server.send("DELETE", try spacePath(space))
        printNow("deleted space \(space)")
    }
}

struct SpaceListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Your spaces and your role in each.")
    @OptionGroup var server: ServerOptions
    @Flag(help: "Print the server's JSON.") var json = false

    func run() async throws {
        let body = try await server.send("GET", Endpoint.spaces)
        if json { return printNow(String(decoding: body, as: UTF8.self)) }
        for membership in try JSONDecoder().decode(SpaceList.self, from: body).spaces { printNow("\(membership.space)\t\(membership.role.rawValue)") }
    }
}

struct SpaceMembersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "members", abstract: "A space's members and their roles.")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The space id.") var space: String
    @Flag(help: "Print the server's JSON.") var json = false

    func validate() throws { _ = try spacePath(space) }

    func run() async throws {
        let body = try await server.send("GET", try endpointPath(Endpoint.members(of: space)))
        if json { return printNow(String(decoding: body, as: UTF8.self)) }
        for member in try JSONDecoder().decode(MemberList.self, from: body).members { printNow("\(member.user)\t\(member.role.rawValue)") }
    }
}

struct SpaceGrantCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "grant", abstract: "Add a member, or change their role (admins).")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The space id.") var space: String
    @Option(help: "The user id to grant.") var user: String
    @Option(help: "read, write or admin.") var role: SpaceRole

    func validate() throws { _ = try memberPath(space, user) }

    func run() async throws {
        let body = try JSONEncoder().encode(RoleRequest(role: role))
        let member = try JSONDecoder().decode(SpaceMember.self, from: try await server.send("PUT", try memberPath(space, user), body: body))
        printNow("\(member.user) is \(member.role.rawValue) in \(space)")
    }
}

struct SpaceRevokeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Remove a member (admins, or yourself to leave).")
    @OptionGroup var server: ServerOptions
    @Argument(help: "The space id.") var space: String
    @Option(help: "The user id to remove.") var user: String

    func validate() throws { _ = try memberPath(space, user) }

    func run() async throws {
        _ = try await server.send("DELETE", try memberPath(space, user))
        printNow("\(user) removed from \(space)")
    }
}
