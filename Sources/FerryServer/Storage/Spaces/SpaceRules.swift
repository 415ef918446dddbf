import FerryProtocol

/// Who may manage a space (PROTOCOL.md, "Spaces"), as pure decisions over what the storage
/// read in the request's transaction, so that every engine answers alike.
enum SpaceRules {
    /// What the caller may see of a space: nothing (`404`) unless a member or a service.
    static func visible(_ space: String, role: SpaceRole?, caller: Caller) throws(ProtocolViolation) {
        guard role != nil || caller.isService else { throw notFound(space) }
    }

    /// An admin's request: `404` to a stranger, `403` to a member with a smaller role.
    static func administers(_ space: String, role: SpaceRole?, caller: Caller) throws(ProtocolViolation) {
        try visible(space, role: role, caller: caller)
        guard caller.isService || role == .admin else {
            throw ProtocolViolation(.forbidden, "managing space '\(space)' needs the admin role; you have \(role?.rawValue ?? "none")")
        }
    }

    /// Changing `user`'s role from `current` to `new` (`nil`: removing them), given how many
    /// admins the space has. Its last admin cannot leave or be demoted.
    static func change(
        _ space: String,
        user: String,
        from current: SpaceRole?,
        to new: SpaceRole?,
        admins: Int
    ) throws(ProtocolViolation) {
        if let new, !new.isKnown {
            throw ProtocolViolation.badRequest("role must be read, write or admin, got '\(new.rawValue.prefix(40))'")
        }
        if current == .admin, new != .admin, admins <= 1 {
            throw ProtocolViolation(
                .lastAdmin,
                "'\(user)' is the last admin of space '\(space)'; make another member admin first, or delete the space"
            )
        }
    }

    /// Adding a space to a user who is a member of `count` already.
    static func joins(_ space: String, user: String, memberships count: Int) throws(ProtocolViolation) {
        guard count < ProtocolLimits.maxSpacesPerUser else {
            throw ProtocolViolation(
                .tooManySpaces,
                "'\(user)' is already a member of \(ProtocolLimits.maxSpacesPerUser) spaces, the most a user may be; leave one first"
            )
        }
    }

    static func notFound(_ space: String) -> ProtocolViolation {
        ProtocolViolation(.notFound, "no space '\(space)' that you are a member of")
    }

    static func notMember(_ user: String, of space: String) -> ProtocolViolation {
        ProtocolViolation(.notFound, "'\(user)' is not a member of space '\(space)'")
    }

    static func exists(_ space: String) -> ProtocolViolation {
        ProtocolViolation(.spaceExists, "space '\(space)' already exists and you do not administer it; choose another id")
    }

    /// The incarnation of the space with `key`, as memberships carry it: the key, which is never
    /// reused (`SpacePartition`).
    static func incarnation(of key: Int64) -> String { String(key) }

    /// The answer to mutation `id` made in an incarnation of `space` that was deleted.
    static func deletedSpaceWrite(id: Int64, space: String) -> PushResult {
        PushResult(
            id: id,
            status: .rejected,
            entityID: nil,
            version: nil,
            error: "the space '\(space)' this change was made in was deleted; a space created since under that id is another space, "
                + "and gets nothing of it",
            code: ErrorCode.spaceDeleted.rawValue
        )
    }

    /// The answer to mutation `id` into a space the caller may not write (`role`: theirs, if any).
    static func refusedWrite(id: Int64, space: String, role: SpaceRole?) -> PushResult {
        PushResult(
            id: id,
            status: .rejected,
            entityID: nil,
            version: nil,
            error: role.map { "space '\(space)': your role is \($0.rawValue), which cannot write" }
                ?? "space '\(space)' does not exist or you are not a member of it",
            code: ErrorCode.forbidden.rawValue
        )
    }
}
