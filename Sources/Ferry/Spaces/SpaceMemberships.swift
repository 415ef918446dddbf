import FerryProtocol
import Foundation
import GRDB

/// What the store keeps of the user's spaces: the memberships a page brings, the incarnation
/// of each space id it saw, and the joins and revocations they start.
enum SpaceMemberships {
    /// What a page changed: the spaces joined and what each revocation removed.
    struct Changes: Sendable {
        var joined: [Membership] = []
        var roleChanged: [(membership: Membership, from: SpaceRole)] = []
        var revoked: [(space: String, removed: Int, deadLettered: Int)] = []
    }

    /// The memberships the store last saw, sorted by space.
    static func read(_ db: Database) throws -> [Membership] {
        try Row.fetchAll(db, sql: "SELECT space, role, incarnation FROM ferry_spaces ORDER BY space").map {
            Membership(space: $0[0], role: SpaceRole(tolerating: $0[1]), incarnation: $0[2])
        }
    }

    /// Applies a page's `revoked` and `spaces`, before its changes, in its transaction: each
    /// revoked space's rows leave the store without capture (with their versions, kept fields
    /// and set-aside copies), and its changes still queued (not in flight: those get the
    /// server's answer) become dead letters with the reason, never silently dropped. A space
    /// the page names with another incarnation than the store's was deleted and created again
    /// under its id: it is another space, so the old one is revoked and the new one joined, even
    /// when the page's cursor did not name the old one. Then the memberships are the page's,
    /// which the guard triggers read.
    static func apply(_ page: PullResponse, store: FerryStore, db: Database) throws -> Changes {
        var changes = Changes()
        let before = Dictionary(try read(db).map { ($0.space, $0) }, uniquingKeysWith: { $1 })
        var revoked = page.revoked
        for membership in page.spaces ?? [] {
            guard let known = before[membership.space]?.incarnation, let incarnation = membership.incarnation, known != incarnation,
                !revoked.contains(membership.space)
            else { continue }
            revoked.append(membership.space)
        }
        for space in revoked {
            changes.revoked.append(try SpaceRevocation.revoke(space, store: store, db: db))
        }
        // Left out: the memberships the cursor was read with, which the store keeps.
        guard let spaces = page.spaces else { return changes }
        try db.execute(sql: "DELETE FROM ferry_spaces")
        let insert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_spaces (space, role, incarnation) VALUES (?, ?, ?)")
        for membership in spaces {
            try insert.execute(arguments: [membership.space, membership.role.rawValue, membership.incarnation])
            try noteIncarnation(of: membership, db: db)
            if let old = before[membership.space], !revoked.contains(membership.space), old.role != membership.role {
                changes.roleChanged.append((membership, old.role))
            }
            if before[membership.space] == nil || revoked.contains(membership.space) {
                changes.joined.append(membership)
                // A join sends no tombstones: rows the store holds of the space already (written
                // here before the join) are checked against what the join brings (`noteJoins`,
                // `finishJoins`).
                if try SpaceJoins.noteCandidates(of: membership.space, store: store, db: db) {
                    try SpaceJoins.begin(membership.space, db: db)
                }
            }
        }
        // The guards name the read-only spaces in their messages.
        if Dictionary(spaces.map { ($0.space, $0.role) }, uniquingKeysWith: { $1 }) != before.mapValues(\.role) {
            try ChangeCapture.reinstallGuards(for: store.tables, in: db)
        }
        return changes
    }

    /// The user's role in `space` as the latest pull read it; `nil` when the store knows none.
    static func role(in space: String, db: Database) throws -> SpaceRole? {
        try String.fetchOne(db, sql: "SELECT role FROM ferry_spaces WHERE space = ?", arguments: [space]).map(SpaceRole.init(tolerating:))
    }

    /// The spaces the user may only read, as the latest pull read them, sorted.
    static func readOnlySpaces(_ db: Database) throws -> [String] {
        try String.fetchAll(db, sql: "SELECT space FROM ferry_spaces WHERE role = 'read' ORDER BY space")
    }

    /// Whether `space` (a SQL expression) is one the user may only read, as a SQL condition for
    /// the capture's guard triggers.
    static func readOnlyCondition(space: String) -> String {
        "\(space) IN (SELECT space FROM ferry_spaces WHERE role = 'read')"
    }

    /// The last incarnation of the space the SQL expression `space` names that this store saw, as
    /// a SQL expression (NULL for one it never saw), for the capture's triggers.
    static func lastIncarnationSQL(space: String) -> String {
        "(SELECT incarnation FROM ferry_space_incarnations WHERE space = \(space))"
    }

    /// A membership the store holds: of which incarnation of its space (`nil` for one from
    /// before incarnations).
    struct Held {
        var incarnation: String?
    }

    /// The store's membership of `space`; `nil` when it holds none.
    static func held(_ space: String, db: Database) throws -> Held? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT incarnation FROM ferry_spaces WHERE space = ?"), arguments: [space])
            .map { Held(incarnation: $0[0]) }
    }

    /// Whether a membership the store holds has no incarnation (one from before `ferry-v13`).
    static func anyWithoutIncarnation(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM ferry_spaces WHERE incarnation IS NULL)") ?? false
    }

    /// Gives `membership`'s space its incarnation where the store held none; whether it did.
    static func learnIncarnation(of membership: Membership, db: Database) throws -> Bool {
        try db.execute(
            sql: "UPDATE ferry_spaces SET incarnation = ? WHERE space = ? AND incarnation IS NULL",
            arguments: [membership.incarnation, membership.space]
        )
        guard db.changesCount > 0 else { return false }
        try noteIncarnation(of: membership, db: db)
        return true
    }

    /// The last incarnation of `space`'s id this store saw.
    static func lastIncarnation(of space: String, db: Database) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT incarnation FROM ferry_space_incarnations WHERE space = ?"), arguments: [space])
    }

    /// Keeps the incarnation of `membership`'s space as the last one of its id this store saw.
    static func noteIncarnation(of membership: Membership, db: Database) throws {
        guard let incarnation = membership.incarnation else { return }
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO ferry_space_incarnations (space, incarnation) VALUES (?, ?)")
            .execute(arguments: [membership.space, incarnation])
    }
}
