import FerryProtocol
import Foundation

/// The space endpoints of PROTOCOL.md, as a test sends them.
extension ServerEndpoint {
    public func createSpace(_ space: String, token: String) async throws -> Reply {
        try await send(.PUT, "/v1/spaces/\(space)", token: token)
    }

    public func deleteSpace(_ space: String, token: String) async throws -> Reply {
        try await send(.DELETE, "/v1/spaces/\(space)", token: token)
    }

    public func listSpaces(token: String) async throws -> Reply {
        try await send(.GET, "/v1/spaces", token: token)
    }

    public func members(of space: String, token: String) async throws -> Reply {
        try await send(.GET, "/v1/spaces/\(space)/members", token: token)
    }

    public func grant(_ role: SpaceRole, to user: String, in space: String, token: String) async throws -> Reply {
        try await send(
            .PUT,
            "/v1/spaces/\(space)/members/\(Self.pathSegment(user))",
            token: token,
            body: JSONEncoder().encode(RoleRequest(role: role))
        )
    }

    public func removeMember(_ user: String, from space: String, token: String) async throws -> Reply {
        try await send(.DELETE, "/v1/spaces/\(space)/members/\(Self.pathSegment(user))", token: token)
    }

    /// Creates `space` as `admin` and grants each member its role; throws unless every answer is a success.
    public func makeSpace(_ space: String, admin: String, members: [String: SpaceRole] = [:]) async throws {
        let token = try await TestServer.token(for: admin)
        let created = try await createSpace(space, token: token)
        guard created.status == 201 else { throw TestFailure("creating \(space) answered \(created.status)") }
        for (user, role) in members.sorted(by: { $0.key < $1.key }) {
            let reply = try await grant(role, to: user, in: space, token: token)
            guard reply.status == 200 else { throw TestFailure("granting \(user) answered \(reply.status): \(reply.errorMessage ?? "")") }
        }
    }

    static func pathSegment(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_.~"))) ?? text
    }
}

extension Membership {
    /// The membership without its incarnation, for comparing with one written in a test.
    public var withoutIncarnation: Membership { Membership(space: space, role: role) }
}

extension [Membership] {
    /// The memberships without their incarnations, for comparing with ones written in a test.
    public var withoutIncarnations: [Membership] { map(\.withoutIncarnation) }
}
