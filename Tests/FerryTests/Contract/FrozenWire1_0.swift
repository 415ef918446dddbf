import Foundation

/// The wire types as the client of protocol 1.0 decodes them, frozen: closed sets of statuses,
/// ops and roles, whole numbers for ids and versions. Never edit them; a later release adds
/// its own frozen copy beside this one (CONTRIBUTING, "The frozen contract").
enum Frozen1_0 {
    enum MutationStatus: String, Decodable { case applied, merged, duplicate, conflict, rejected }
    enum MutationOp: String, Decodable { case upsert, delete }
    enum SpaceRole: String, Decodable { case read, write, admin }

    struct RecordState: Decodable {
        var version: Int64
        var deleted: Bool
        var data: [String: JSONAny]?
        var naturalKey: String?
        var changedAt: Int64?
    }

    struct PushResult: Decodable {
        var id: Int64
        var status: MutationStatus
        var entityID: String?
        var version: Int64?
        var current: RecordState?
        var error: String?
        var code: String?
    }

    struct PushResponse: Decodable {
        var lastMutationID: Int64
        var results: [PushResult]
    }

    struct Change: Decodable {
        var entity: String
        var entityID: String
        var op: MutationOp
        var version: Int64
        var naturalKey: String?
        var data: [String: JSONAny]?
        var space: String?
    }

    struct Membership: Decodable {
        var space: String
        var role: SpaceRole
        var incarnation: String?
    }

    struct PullResponse: Decodable {
        var changes: [Change]
        var cursor: String
        var hasMore: Bool
        var spaces: [Membership]?
        var revoked: [String]?
    }

    struct SpaceMember: Decodable {
        var user: String
        var role: SpaceRole
    }

    struct SpaceList: Decodable { var spaces: [Membership] }
    struct MemberList: Decodable { var members: [SpaceMember] }
    struct HealthResponse: Decodable { var status: String }

    struct ErrorEnvelope: Decodable {
        struct Detail: Decodable {
            var code: String
            var message: String
        }
        var error: Detail
    }

    /// Any JSON value, as record data.
    struct JSONAny: Decodable {
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() { return }
            if (try? container.decode(Bool.self)) != nil { return }
            if (try? container.decode(Double.self)) != nil { return }
            if (try? container.decode(String.self)) != nil { return }
            if (try? container.decode([JSONAny].self)) != nil { return }
            _ = try container.decode([String: JSONAny].self)
        }
    }

    /// Decodes `body`, the answer to `method path` with `status`, as the 1.0 client would;
    /// throws what it could not decode.
    static func decode(method: String, path: String, status: Int, body: Data) throws {
        let decoder = JSONDecoder()
        let route = String(path.prefix { $0 != "?" })
        guard method != "HEAD" else { return }  // no body
        if status >= 400 {
            _ = try decoder.decode(ErrorEnvelope.self, from: body)
            return
        }
        switch (method, route) {
        case ("POST", "/v1/push"): _ = try decoder.decode(PushResponse.self, from: body)
        case ("GET", "/v1/pull"): _ = try decoder.decode(PullResponse.self, from: body)
        case ("GET", "/v1/health"): _ = try decoder.decode(HealthResponse.self, from: body)
        case ("GET", "/v1/spaces"): _ = try decoder.decode(SpaceList.self, from: body)
        case ("PUT", _) where route.hasPrefix("/v1/spaces/") && route.contains("/members/"):
            _ = try decoder.decode(SpaceMember.self, from: body)
        case ("PUT", _) where route.hasPrefix("/v1/spaces/"): _ = try decoder.decode(Membership.self, from: body)
        case ("GET", _) where route.hasPrefix("/v1/spaces/") && route.hasSuffix("/members"): _ = try decoder.decode(MemberList.self, from: body)
        default: break  // no body, or bytes (an attachment's)
        }
    }

    /// The statuses of a push answer, for comparing a replay with the recording.
    static func statuses(_ body: Data) -> [String]? {
        (try? JSONDecoder().decode(PushResponse.self, from: body))?.results.map(\.status.rawValue)
    }
}
