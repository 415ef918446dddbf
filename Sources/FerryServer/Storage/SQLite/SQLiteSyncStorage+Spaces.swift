import FerryProtocol
import Foundation
import GRDB

/// Space management on SQLite: each request is one write transaction, which the single writer
/// keeps from every other write, pushes included.
extension SQLiteSyncStorage {
    /// Creates the space in one transaction (``SyncStorage/createSpace(_:by:)``).
    public func createSpace(_ space: String, by caller: Caller) async throws -> (membership: Membership, created: Bool) {
        try SpaceRequest.check(space: space)
        return try await mapErrors {
            try await writer.write { db in
                let membership = { (key: Int64) in Membership(space: space, role: .admin, incarnation: SpaceRules.incarnation(of: key)) }
                if let (key, role) = try Self.space(space, caller: caller, db: db) {
                    guard caller.isService || role == .admin else { throw SpaceRules.exists(space) }
                    return (membership(key), false)
                }
                if !caller.isService {
                    try SpaceRules.joins(space, user: caller.userID, memberships: try Self.membershipCount(of: caller.userID, db: db))
                }
                guard let key = try Int64.fetchOne(db, sql: "INSERT INTO spaces (id) VALUES (?) RETURNING key", arguments: [space]) else {
                    throw StorageError.corrupt("a space just inserted has no key")
                }
                if !caller.isService {
                    try db.execute(
                        sql: "INSERT INTO space_members (space_key, user_id, role) VALUES (?, ?, 'admin')",
                        arguments: [key, caller.userID]
                    )
                    try self.membershipsChanged(of: [caller.userID], db: db)
                }
                return (membership(key), true)
            }
        }
    }

    /// Deletes the space, its members and its records in one transaction (``SyncStorage/deleteSpace(_:by:)``).
    public func deleteSpace(_ space: String, by caller: Caller) async throws {
        try SpaceRequest.check(space: space)
        try await mapErrors {
            try await writer.write { db in
                let (key, role) = try Self.visibleSpace(space, caller: caller, db: db)
                try SpaceRules.administers(space, role: role, caller: caller)
                let partition = SpacePartition.name(key)
                try db.execute(sql: "UPDATE spaces SET deleted = 1 WHERE key = ?", arguments: [key])
                try self.membershipsChanged(
                    of: try String.fetchAll(db, sql: "SELECT user_id FROM space_members WHERE space_key = ?", arguments: [key]),
                    db: db
                )
                try db.execute(sql: "DELETE FROM space_members WHERE space_key = ?", arguments: [key])
                try db.execute(sql: "DELETE FROM records WHERE user_id = ?", arguments: [partition])
                try db.execute(sql: "DELETE FROM user_horizons WHERE user_id = ?", arguments: [partition])
            }
        }
    }

    /// The user's memberships, sorted by space id (``SyncStorage/memberships(of:)``).
    public func memberships(of userID: String) async throws -> [Membership] {
        try await mapErrors {
            try await writer.read { db in
                try Row.fetchAll(
                    db,
                    sql: "SELECT s.id, m.role, s.key FROM space_members m JOIN spaces s ON s.key = m.space_key WHERE m.user_id = ? ORDER BY s.id",
                    arguments: [userID]
                ).map { Membership(space: $0[0], role: SpaceRole(rawValue: $0[1]) ?? .read, incarnation: SpaceRules.incarnation(of: $0[2])) }
            }
        }
    }

    /// The members of the space, sorted by user (``SyncStorage/members(of:by:)``).
    public func members(of space: String, by caller: Caller) async throws -> [SpaceMember] {
        try SpaceRequest.check(space: space)
        return try await mapErrors {
            try await writer.read { db in
                let (key, _) = try Self.visibleSpace(space, caller: caller, db: db)
                return try Self.members(key, db: db)
            }
        }
    }

    /// Adds the member or changes their role in one transaction (``SyncStorage/setRole(_:of:in:by:)``).
    public func setRole(_ role: SpaceRole, of user: String, in space: String, by caller: Caller) async throws -> SpaceMember {
        try SpaceRequest.check(space: space)
        try SpaceRequest.check(user: user)
        return try await mapErrors {
            try await writer.write { db in
                let (key, callerRole) = try Self.visibleSpace(space, caller: caller, db: db)
                try SpaceRules.administers(space, role: callerRole, caller: caller)
                let members = try Self.members(key, db: db)
                let current = members.first { $0.user.hasSameBytes(as: user) }?.role
                try SpaceRules.change(space, user: user, from: current, to: role, admins: members.count { $0.role == .admin })
                if current == nil {
                    try SpaceRules.joins(space, user: user, memberships: try Self.membershipCount(of: user, db: db))
                }
                try db.execute(
                    sql: """
                        INSERT INTO space_members (space_key, user_id, role) VALUES (?, ?, ?)
                        ON CONFLICT (space_key, user_id) DO UPDATE SET role = excluded.role
                        """,
                    arguments: [key, user, role.rawValue]
                )
                try self.membershipsChanged(of: [user], db: db)
                return SpaceMember(user: user, role: role)
            }
        }
    }

    /// Removes the member in one transaction (``SyncStorage/removeMember(_:from:by:)``).
    public func removeMember(_ user: String, from space: String, by caller: Caller) async throws {
        try SpaceRequest.check(space: space)
        try SpaceRequest.check(user: user)
        try await mapErrors {
            try await writer.write { db in
                let (key, callerRole) = try Self.visibleSpace(space, caller: caller, db: db)
                if caller.isService || !caller.userID.hasSameBytes(as: user) {
                    try SpaceRules.administers(space, role: callerRole, caller: caller)
                }
                let members = try Self.members(key, db: db)
                guard let current = members.first(where: { $0.user.hasSameBytes(as: user) })?.role else {
                    throw SpaceRules.notMember(user, of: space)
                }
                try SpaceRules.change(space, user: user, from: current, to: nil, admins: members.count { $0.role == .admin })
                try db.execute(sql: "DELETE FROM space_members WHERE space_key = ? AND user_id = ?", arguments: [key, user])
                try self.membershipsChanged(of: [user], db: db)
            }
        }
    }

    /// The live space `space`'s key and the caller's role in it; `nil` when there is none.
    private static func space(_ space: String, caller: Caller, db: Database) throws -> (key: Int64, role: SpaceRole?)? {
        try Row.fetchOne(
            db,
            sql: """
                SELECT s.key, m.role FROM spaces s LEFT JOIN space_members m ON m.space_key = s.key AND m.user_id = ?
                WHERE s.id = ? AND s.deleted = 0
                """,
            arguments: [caller.userID, space]
        ).map { ($0[0], ($0[1] as String?).flatMap(SpaceRole.init(rawValue:))) }
    }

    /// The live space the caller may see: `404` for a space that does not exist or that a caller
    /// other than a service is not a member of (membership is not revealed).
    private static func visibleSpace(_ space: String, caller: Caller, db: Database) throws -> (key: Int64, role: SpaceRole?) {
        guard let found = try Self.space(space, caller: caller, db: db), found.role != nil || caller.isService else {
            throw SpaceRules.notFound(space)
        }
        return found
    }

    private static func members(_ key: Int64, db: Database) throws -> [SpaceMember] {
        try Row.fetchAll(db, sql: "SELECT user_id, role FROM space_members WHERE space_key = ? ORDER BY user_id", arguments: [key])
            .map { SpaceMember(user: $0[0], role: SpaceRole(rawValue: $0[1]) ?? .read) }
    }

    /// Moves the version of each user's memberships (`PullPosition.memberships`), and tells
    /// their event streams once the transaction commits (never before: a stream reading them
    /// again too early would read the old ones).
    private func membershipsChanged(of users: [String], db: Database) throws {
        let statement = try db.cachedStatement(
            sql: "INSERT INTO member_versions (user_id, version) VALUES (?, 1) ON CONFLICT (user_id) DO UPDATE SET version = version + 1"
        )
        for user in users { try statement.execute(arguments: [user]) }
        let changes = self.changes
        db.afterNextTransaction { _ in changes.announce(users.map { .memberships(user: $0) }) }
    }

    private static func membershipCount(of user: String, db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT count(*) FROM space_members WHERE user_id = ?", arguments: [user]) ?? 0
    }
}
