import ArgumentParser
import FerryServer
import Foundation

/// `ferry token` and `ferry-server token`: a token for a user, signed with the servers' secret.
public struct TokenCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a token that a server with the same secret accepts."
    )

    @Option(help: "The user id (the token's sub claim).")
    var user: String

    @Option(help: "HS256 secret; falls back to FERRY_JWT_SECRET.")
    var secret: String?

    @Option(help: "Seconds until the token expires.")
    var ttl = 86_400

    @Flag(help: "A service token (\"ferry_admin\": true): an app's backend, admin of every space and member of none.")
    var admin = false

    public init() {}

    public func validate() throws {
        guard !user.isEmpty else { throw ValidationError("--user must not be empty") }
        guard ttl > 0 else { throw ValidationError("--ttl must be a positive number of seconds, got \(ttl)") }
        guard let secret = configuredSecret, !secret.isEmpty else {
            throw ValidationError("no secret: pass --secret S or set FERRY_JWT_SECRET to the server's secret")
        }
        do { try TokenAuthority.check(secret: secret) } catch { throw ValidationError("--secret: \(error)") }
    }

    /// `--secret`, else `FERRY_JWT_SECRET`.
    private var configuredSecret: String? { secret ?? ProcessInfo.processInfo.environment["FERRY_JWT_SECRET"] }

    public func run() async throws {
        let authority = try await TokenAuthority(secret: configuredSecret ?? "")
        print(try await authority.issue(userID: user, ttl: .seconds(ttl), service: admin))
    }
}
