import FerryProtocol
import Foundation

/// Managing spaces from the app (PROTOCOL.md, "Spaces"): for apps where users share with each
/// other, as with CloudKit shares. An app's backend manages spaces with a service token instead.
/// A refusal throws ``FerryError/refused(code:message:)`` with the server's code and message;
/// an invalid space or user id is refused before any request.
extension FerryClient {
    /// Creates `space` with the signed-in user its admin; the same if they already administer it.
    @discardableResult
    public func createSpace(_ space: String) async throws -> Membership {
        let membership = try await request("PUT", Self.path(Endpoint.space(space)), answer: Membership.self)
        // The creator's first writes are bound to this space before any pull has seen it.
        try await store.database.write { db in try SpaceMemberships.noteIncarnation(of: membership, db: db) }
        return membership
    }

    /// Deletes `space` and its records; every member loses access. Admins only.
    public func deleteSpace(_ space: String) async throws {
        try await request("DELETE", Self.path(Endpoint.space(space)))
    }

    /// The signed-in user's memberships, from the server, sorted by space id.
    public func spaces() async throws -> [Membership] {
        try await request("GET", Endpoint.spaces, answer: SpaceList.self).spaces
    }

    /// The members of `space`, sorted by user.
    public func members(of space: String) async throws -> [SpaceMember] {
        try await request("GET", Self.path(Endpoint.members(of: space)), answer: MemberList.self).members
    }

    /// Adds `user` to `space` with `role`, or changes their role. Admins only.
    @discardableResult
    public func setRole(_ role: SpaceRole, of user: String, in space: String) async throws -> SpaceMember {
        try await request(
            "PUT",
            try Self.path(Endpoint.member(user, of: space)),
            body: try JSONEncoder().encode(RoleRequest(role: role)),
            answer: SpaceMember.self
        )
    }

    /// Removes `user` from `space`: an admin's request, or the user's own (leaving).
    public func removeMember(_ user: String, from space: String) async throws {
        try await request("DELETE", try Self.path(Endpoint.member(user, of: space)))
    }

    /// A store from before incarnations (`ferry-v13`) holds memberships without one, and a pull
    /// reports them again only once they change: their incarnations are asked for once, so that
    /// changes made from now on are bound to the spaces the store holds. A store opened by this
    /// version learns them at its client's first run; every membership it writes has one.
    func learnIncarnations() async throws {
        let unknown = try await store.database.read { db in try SpaceMemberships.anyWithoutIncarnation(db) }
        guard unknown else {
            incarnationsKnown = true
            return
        }
        let memberships = try await spaces()
        try await store.database.write { db in
            for membership in memberships where membership.incarnation != nil {
                _ = try SpaceMemberships.learnIncarnation(of: membership, db: db)
            }
        }
        incarnationsKnown = true  // what the server could not say, a later pull of the space does
    }

    /// A path of `Endpoint`, or a `bad_request` refusal before any request.
    private static func path(_ path: Result<String, EndpointProblem>) throws -> String {
        try path.mapError { FerryError.refused(code: ErrorCode.badRequest.rawValue, message: $0.message) }.get()
    }

    @discardableResult
    private func request<Answer: Decodable>(_ method: String, _ path: String, body: Data? = nil, answer: Answer.Type) async throws -> Answer {
        let response = try await send(TransportRequest(method: method, path: path, body: body))
        do {
            return try JSONDecoder().decode(Answer.self, from: response.body)
        } catch {
            throw FerryError.protocolViolation("\(method) \(path) answered a body that is not \(Answer.self): \(error)", underlying: error)
        }
    }

    private func request(_ method: String, _ path: String) async throws {
        _ = try await send(TransportRequest(method: method, path: path))
    }
}
