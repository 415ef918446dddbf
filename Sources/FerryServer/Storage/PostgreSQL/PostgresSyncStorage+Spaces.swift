import FerryProtocol
import Logging
import PostgresNIO

/// Space management on PostgreSQL, for any number of server processes: a request that changes
/// a space's members locks the space's row first, so two admins demoting each other cannot
/// leave it without one; one that adds a member takes an advisory lock on that user, so two
/// grants cannot both pass the 1,000-space limit; deleting a space takes its change lock too,
/// so it waits for the pushes writing to it and none writes to it after.
extension PostgresSyncStorage {
    /// Creates the space in one transaction (``SyncStorage/createSpace(_:by:)``).
    public func createSpace(_ space: String, by caller: Caller) async throws -> (membership: Membership, created: Bool) {
        try SpaceRequest.check(space: space)
        return try await inTransaction { db, logger in
            let membership = { (key: Int64) in Membership(space: space, role: .admin, incarnation: SpaceRules.incarnation(of: key)) }
            if !caller.isService { try await Self.lockMemberships(of: caller.userID, db: db, logger: logger) }
            for attempt in 0..<2 {
                if let (key, role) = try await Self.space(space, caller: caller, locking: false, db: db, logger: logger) {
                    guard caller.isService || role == .admin else { throw SpaceRules.exists(space) }
                    return (membership(key), false)
                }
                if !caller.isService {
                    try SpaceRules.joins(
                        space,
                        user: caller.userID,
                        memberships: try await Self.membershipCount(of: caller.userID, db: db, logger: logger)
                    )
                }
                // A space created at the same moment by another request: this insert waits for
                // it and inserts nothing, and the read above then finds it.
                for try await key in try await db.query(
                    "INSERT INTO spaces (id) VALUES (\(space)) ON CONFLICT (id) WHERE NOT deleted DO NOTHING RETURNING key",
                    logger: logger
                ).decode(Int64.self) {
                    if !caller.isService {
                        try await db.query(
                            "INSERT INTO space_members (space_key, user_id, role) VALUES (\(key), \(caller.userID), 'admin')",
                            logger: logger
                        )
                        try await Self.membershipsChanged(of: [caller.userID], db: db, logger: logger)
                    }
                    return (membership(key), true)
                }
                if attempt == 1 { break }
            }
            throw StorageError.unavailable("space '\(space)' was created and deleted while this request ran; try again")
        }
    }

    /// Deletes the space, its members and its records in one transaction (``SyncStorage/deleteSpace(_:by:)``).
    public func deleteSpace(_ space: String, by caller: Caller) async throws {
        try SpaceRequest.check(space: space)
        try await inTransaction { db, logger in
            let (key, role) = try await Self.visibleSpace(space, caller: caller, db: db, logger: logger)
            try SpaceRules.administers(space, role: role, caller: caller)
            let partition = SpacePartition.name(key)
            _ = try await Self.lockChanges(of: partition, db: db, logger: logger)
            try await db.query("UPDATE spaces SET deleted = true WHERE key = \(key)", logger: logger)
            var members: [String] = []
            for try await user in try await db.query("DELETE FROM space_members WHERE space_key = \(key) RETURNING user_id", logger: logger)
                .decode(String.self)
            {
                members.append(user)
            }
            try await Self.membershipsChanged(of: members, db: db, logger: logger)
            try await db.query("DELETE FROM records WHERE user_id = \(partition)", logger: logger)
        }
    }

    /// The user's memberships, sorted by space id (``SyncStorage/memberships(of:)``).
    public func memberships(of userID: String) async throws -> [Membership] {
        try await withDatabase { [logger] db in
            var memberships: [Membership] = []
            for try await (space, role, key) in try await db.query(
                "SELECT s.id, m.role, s.key FROM space_members m JOIN spaces s ON s.key = m.space_key WHERE m.user_id = \(userID) ORDER BY s.id",
                logger: logger
            ).decode((String, String, Int64).self) {
                memberships.append(Membership(space: space, role: SpaceRole(rawValue: role) ?? .read, incarnation: SpaceRules.incarnation(of: key)))
            }
            return memberships
        }
    }

    /// The members of the space, sorted by user (``SyncStorage/members(of:by:)``).
    public func members(of space: String, by caller: Caller) async throws -> [SpaceMember] {
        try SpaceRequest.check(space: space)
        return try await inTransaction { db, logger in
            let (key, _) = try await Self.visibleSpace(space, caller: caller, locking: false, db: db, logger: logger)
            return try await Self.members(key, db: db, logger: logger)
        }
    }

    /// Adds the member or changes their role in one transaction (``SyncStorage/setRole(_:of:in:by:)``).
    public func setRole(_ role: SpaceRole, of user: String, in space: String, by caller: Caller) async throws -> SpaceMember {
        try SpaceRequest.check(space: space)
        try SpaceRequest.check(user: user)
        return try await inTransaction { db, logger in
            let (key, callerRole) = try await Self.visibleSpace(space, caller: caller, db: db, logger: logger)
            try SpaceRules.administers(space, role: callerRole, caller: caller)
            let members = try await Self.members(key, db: db, logger: logger)
            let current = members.first { $0.user.hasSameBytes(as: user) }?.role
            try SpaceRules.change(space, user: user, from: current, to: role, admins: members.count { $0.role == .admin })
            if current == nil {
                try await Self.lockMemberships(of: user, db: db, logger: logger)
                try SpaceRules.joins(space, user: user, memberships: try await Self.membershipCount(of: user, db: db, logger: logger))
            }
            try await db.query(
                """
                INSERT INTO space_members (space_key, user_id, role) VALUES (\(key), \(user), \(role.rawValue))
                ON CONFLICT (space_key, user_id) DO UPDATE SET role = excluded.role
                """,
                logger: logger
            )
            try await Self.membershipsChanged(of: [user], db: db, logger: logger)
            return SpaceMember(user: user, role: role)
        }
    }

    /// Removes the member in one transaction (``SyncStorage/removeMember(_:from:by:)``).
    public func removeMember(_ user: String, from space: String, by caller: Caller) async throws {
        try SpaceRequest.check(space: space)
        try SpaceRequest.check(user: user)
        try await inTransaction { db, logger in
            let (key, callerRole) = try await Self.visibleSpace(space, caller: caller, db: db, logger: logger)
            if caller.isService || !caller.userID.hasSameBytes(as: user) {
                try SpaceRules.administers(space, role: callerRole, caller: caller)
            }
            let members = try await Self.members(key, db: db, logger: logger)
            guard let current = members.first(where: { $0.user.hasSameBytes(as: user) })?.role else { throw SpaceRules.notMember(user, of: space) }
            try SpaceRules.change(space, user: user, from: current, to: nil, admins: members.count { $0.role == .admin })
            try await db.query("DELETE FROM space_members WHERE space_key = \(key) AND user_id = \(user)", logger: logger)
            try await Self.membershipsChanged(of: [user], db: db, logger: logger)
        }
    }

    /// `body` in a transaction on a pooled connection.
    private func inTransaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T) async throws -> T {
        try await withDatabase { [logger] db in try await Self.transaction(db, logger: logger) { db in try await body(db, logger) } }
    }

    /// The live space `space`'s key (its row locked unless `locking` is false) and the caller's
    /// role in it, read after the lock; `nil` when there is none.
    private static func space(
        _ space: String,
        caller: Caller,
        locking: Bool = true,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> (key: Int64, role: SpaceRole?)? {
        let query: PostgresQuery =
            locking
            ? "SELECT key FROM spaces WHERE id = \(space) AND NOT deleted FOR UPDATE"
            : "SELECT key FROM spaces WHERE id = \(space) AND NOT deleted"
        var key: Int64?
        for try await found in try await db.query(query, logger: logger).decode(Int64.self) { key = found }
        guard let key else { return nil }
        var role: SpaceRole?
        for try await found in try await db.query(
            "SELECT role FROM space_members WHERE space_key = \(key) AND user_id = \(caller.userID)",
            logger: logger
        ).decode(String.self) {
            role = SpaceRole(rawValue: found)
        }
        return (key, role)
    }

    /// The live space the caller may see: `404` for one that does not exist or that a caller
    /// other than a service is not a member of (membership is not revealed).
    private static func visibleSpace(
        _ space: String,
        caller: Caller,
        locking: Bool = true,
        db: PostgresConnection,
        logger: Logger
    ) async throws -> (key: Int64, role: SpaceRole?) {
        guard let found = try await Self.space(space, caller: caller, locking: locking, db: db, logger: logger),
            found.role != nil || caller.isService
        else { throw SpaceRules.notFound(space) }
        return found
    }

    private static func members(_ key: Int64, db: PostgresConnection, logger: Logger) async throws -> [SpaceMember] {
        var members: [SpaceMember] = []
        for try await (user, role) in try await db.query(
            "SELECT user_id, role FROM space_members WHERE space_key = \(key) ORDER BY user_id",
            logger: logger
        ).decode((String, String).self) {
            members.append(SpaceMember(user: user, role: SpaceRole(rawValue: role) ?? .read))
        }
        return members
    }

    /// Holds, until the transaction ends, the lock that orders the requests adding `user` to spaces.
    private static func lockMemberships(of user: String, db: PostgresConnection, logger: Logger) async throws {
        try await db.query("SELECT pg_advisory_xact_lock(hashtextextended('ferry-memberships:' || \(user), 0))", logger: logger)
    }

    /// Moves the version of each user's memberships (`PullPosition.memberships`), and tells their
    /// event streams on every process, at the commit (`NOTIFY` in the transaction).
    private static func membershipsChanged(of users: [String], db: PostgresConnection, logger: Logger) async throws {
        try await notify(users.map { .memberships(user: $0) }, db: db, logger: logger)
        try await db.query(
            """
            INSERT INTO member_versions (user_id, version) SELECT unnest(\(users)::text[]), 1
            ON CONFLICT (user_id) DO UPDATE SET version = member_versions.version + 1
            """,
            logger: logger
        )
    }

    private static func membershipCount(of user: String, db: PostgresConnection, logger: Logger) async throws -> Int {
        for try await count in try await db.query("SELECT count(*)::int8 FROM space_members WHERE user_id = \(user)", logger: logger)
            .decode(Int.self)
        {
            return count
        }
        return 0
    }
}
