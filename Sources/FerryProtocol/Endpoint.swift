import Foundation

/// The paths of PROTOCOL.md's endpoints, written once for the server's routes and every client.
package enum Endpoint {
    /// What every path of the protocol starts with.
    package static let prefix = "/v1/"
    package static let health = "/v1/health"
    package static let push = "/v1/push"
    package static let pull = "/v1/pull"
    package static let events = "/v1/events"
    package static let spaces = "/v1/spaces"
    package static let attachments = "/v1/attachments"

    /// `/v1/spaces/{space}`, or why the protocol refuses the id.
    package static func space(_ space: String) -> Result<String, EndpointProblem> {
        if let problem = ProtocolValidation.spaceIDProblem(space) { return .failure(EndpointProblem(message: problem)) }
        return .success("\(spaces)/\(space)")
    }

    /// `/v1/spaces/{space}/members`.
    package static func members(of space: String) -> Result<String, EndpointProblem> {
        Self.space(space).map { $0 + "/members" }
    }

    /// `/v1/spaces/{space}/members/{user}`, the user percent-encoded (a user id is any text).
    package static func member(_ user: String, of space: String) -> Result<String, EndpointProblem> {
        guard !user.isEmpty, let encoded = user.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(.init(charactersIn: "-_.~")))
        else { return .failure(EndpointProblem(message: "user must be 1 to 256 characters")) }
        return members(of: space).map { $0 + "/\(encoded)" }
    }
}

/// Why a path could not be written: the message names what to fix.
package struct EndpointProblem: Error, Sendable {
    package var message: String
}

/// The names of the events of `GET /v1/events` (PROTOCOL.md, "Live changes").
package enum LiveEventName {
    /// The stream is registered: changes from here on are announced.
    package static let ready = "ready"
    /// Something the user can read changed: pull.
    package static let change = "change"
}
