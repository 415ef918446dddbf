import FerryProtocol
import Foundation
import Hummingbird
import NIOCore

/// The handlers of PROTOCOL.md's space endpoints: spaces, their members and roles.
struct SpaceController: Sendable {
    let storage: any SyncStorage

    func create(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let (membership, created) = try await storage.createSpace(try Self.parameter("space", of: context), by: try Self.caller(context))
        return try JSONResponse.make(membership, status: created ? .created : .ok)
    }

    func delete(_ request: Request, context: FerryRequestContext) async throws -> Response {
        try await storage.deleteSpace(try Self.parameter("space", of: context), by: try Self.caller(context))
        return Response(status: .noContent)
    }

    func list(_ request: Request, context: FerryRequestContext) async throws -> Response {
        try JSONResponse.make(SpaceList(spaces: try await storage.memberships(of: try Self.caller(context).userID)))
    }

    func members(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let members = try await storage.members(of: try Self.parameter("space", of: context), by: try Self.caller(context))
        return try JSONResponse.make(MemberList(members: members))
    }

    func setRole(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let space = try Self.parameter("space", of: context)
        let user = try Self.parameter("user", of: context)
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: 64 * 1024)
        } catch {
            throw ProtocolViolation.badRequest("body must be a JSON object {\"role\": …} of at most 64 KiB")
        }
        let role = try RoleRequest.decode(from: Data(body.readableBytesView)).role
        return try JSONResponse.make(try await storage.setRole(role, of: user, in: space, by: try Self.caller(context)))
    }

    func removeMember(_ request: Request, context: FerryRequestContext) async throws -> Response {
        let space = try Self.parameter("space", of: context)
        try await storage.removeMember(try Self.parameter("user", of: context), from: space, by: try Self.caller(context))
        return Response(status: .noContent)
    }

    private static func caller(_ context: FerryRequestContext) throws -> Caller {
        guard let userID = context.userID else { throw AuthFailure.missingHeader }
        return Caller(userID: userID, isService: context.isService)
    }

    /// A path parameter, percent-decoded.
    private static func parameter(_ name: String, of context: FerryRequestContext) throws -> String {
        guard let raw = context.parameters.get(name), let value = raw.removingPercentEncoding else {
            throw ProtocolViolation.badRequest("\(name) in the path is not valid percent-encoded UTF-8")
        }
        return value
    }
}

extension RoleRequest {
    /// Decodes `{"role": …}`; anything else is a `bad_request` naming the field.
    static func decode(from body: Data) throws(ProtocolViolation) -> RoleRequest {
        // Foundation's parser: other fields are ignored whatever they hold (an integer past 64 bits included).
        guard let fields = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw .badRequest("body must be a JSON object {\"role\": \"read\" | \"write\" | \"admin\"}")
        }
        guard let text = fields["role"] as? String, let role = SpaceRole(rawValue: text) else {
            throw .badRequest("role must be one of read, write, admin")
        }
        return RoleRequest(role: role)
    }
}
