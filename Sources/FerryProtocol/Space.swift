/// What a member of a space may do (PROTOCOL.md, "Spaces").
///
/// An open set: a later server may name a role this version does not know. Such a role is
/// kept as the server spelled it (``isKnown`` is false), so that it survives an app update
/// unchanged; the server, which enforces every role, decides what it allows.
public struct SpaceRole: RawRepresentable, Sendable, Codable, Hashable, CaseIterable, CustomStringConvertible {
    /// The role as the wire spells it.
    public let rawValue: String

    /// Pull the space's records.
    public static let read = SpaceRole(tolerating: "read")
    /// Pull and push.
    public static let write = SpaceRole(tolerating: "write")
    /// Write, and manage the space's members.
    public static let admin = SpaceRole(tolerating: "admin")

    /// The roles this version knows.
    public static let allCases: [SpaceRole] = [.read, .write, .admin]

    /// One of the roles this version knows; `nil` for any other name.
    public init?(rawValue: String) {
        guard Self.allCases.contains(where: { $0.rawValue == rawValue }) else { return nil }
        self.rawValue = rawValue
    }

    /// `raw` as a role, known or not (a later server's): what a client reads from the server.
    public init(tolerating raw: String) {
        rawValue = raw
    }

    /// The role as the wire spells it: `write`.
    public var description: String { rawValue }

    /// Whether this version knows the role.
    public var isKnown: Bool { Self.allCases.contains(self) }

    /// Whether a member with this role may push to the space. Only `read` is known to refuse;
    /// a role this version does not know is left to the server, which answers each write.
    public var canWrite: Bool { self != .read }
}

/// One space a user belongs to, with their role in it: an entry of `GET /v1/spaces` and of a pull's `spaces`.
public struct Membership: Sendable, Codable, Hashable {
    /// The space's id.
    public var space: String
    /// The user's role in it.
    public var role: SpaceRole
    /// Which space of that id it is: a space deleted and created again under the same id is
    /// another space, with another incarnation. Opaque; `nil` from a server that does not say.
    public var incarnation: String?

    /// A membership from its fields.
    public init(space: String, role: SpaceRole, incarnation: String? = nil) {
        self.space = space
        self.role = role
        self.incarnation = incarnation
    }

    /// Keeps a role this version does not know as the server spelled it (``SpaceRole/init(tolerating:)``).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        space = try container.decode(String.self, forKey: .space)
        role = SpaceRole(tolerating: try container.decode(String.self, forKey: .role))
        incarnation = try container.decodeIfPresent(String.self, forKey: .incarnation)
    }
}

/// One member of a space: an entry of `GET /v1/spaces/{space}/members`.
public struct SpaceMember: Sendable, Codable, Hashable {
    /// The member's user id (their tokens' `sub`).
    public var user: String
    /// Their role.
    public var role: SpaceRole

    /// A member from its fields.
    public init(user: String, role: SpaceRole) {
        self.user = user
        self.role = role
    }

    /// Keeps a role this version does not know as the server spelled it (``SpaceRole/init(tolerating:)``).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        user = try container.decode(String.self, forKey: .user)
        role = SpaceRole(tolerating: try container.decode(String.self, forKey: .role))
    }
}

/// `GET /v1/spaces` response body.
public struct SpaceList: Sendable, Codable, Hashable {
    /// The caller's memberships, sorted by space id.
    public var spaces: [Membership]
    /// A list from its memberships.
    public init(spaces: [Membership]) { self.spaces = spaces }
}

/// `GET /v1/spaces/{space}/members` response body.
public struct MemberList: Sendable, Codable, Hashable {
    /// The space's members, sorted by user id.
    public var members: [SpaceMember]
    /// A list from its members.
    public init(members: [SpaceMember]) { self.members = members }
}

/// `PUT /v1/spaces/{space}/members/{user}` request body.
public struct RoleRequest: Sendable, Codable, Hashable {
    /// The role to give.
    public var role: SpaceRole
    /// A request for `role`.
    public init(role: SpaceRole) { self.role = role }
}

extension ProtocolValidation {
    /// `nil` when `space` can name a space: 1 to 64 characters of `a-z 0-9 _ -`, starting with a
    /// letter or digit; else why not.
    public static func spaceIDProblem(_ space: String) -> String? {
        let scalars = Array(space.unicodeScalars)
        guard (1...ProtocolLimits.maxSpaceIDLength).contains(scalars.count) else {
            return "space must be 1 to \(ProtocolLimits.maxSpaceIDLength) characters, got \(scalars.count)"
        }
        let allowed = { (scalar: Unicode.Scalar) in ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) }
        guard allowed(scalars[0]), scalars.allSatisfy({ allowed($0) || $0 == "_" || $0 == "-" }) else {
            return "space may contain only a-z 0-9 _ - and must start with a letter or digit, got '\(space.prefix(64))'"
        }
        return nil
    }
}
