import FerryProtocol

/// What a cursor stands for: where a pull stands in the personal space's history and in the
/// history of each space it has begun to read, by the space's key (`SpacePartition`).
///
/// Each space is a history of its own, with positions that commit in order within it (a push
/// holds its space's change lock, as a user's push holds the user's), and no order across
/// spaces. So a cursor over many spaces is one position per space: a pull reads them one after
/// another, each exactly as a personal pull reads the user's, and no interleaving of pushes to
/// different spaces can move one space's position past a change that commits late in it.
/// A space the cursor does not name is read from its beginning (joining); a space it names that
/// the user can no longer read is reported `revoked` and dropped from the next cursor.
///
/// It also carries a digest of the memberships it was read with, so that a page whose
/// memberships are the same leaves them out: a user in 1,000 spaces is not sent the list
/// with every empty pull.
struct PullPosition: Sendable, Equatable {
    var personal: PullCursor
    var spaces: [Int64: PullCursor] = [:]
    /// `PullPosition.digest(of:)` of the memberships the cursor was read with.
    var memberships: UInt64 = Self.digest(of: [])

    init(personal: PullCursor, spaces: [Int64: PullCursor] = [:], memberships: UInt64 = Self.digest(of: [])) {
        self.personal = personal
        self.spaces = spaces
        self.memberships = memberships
    }

    /// FNV-1a over the memberships, sorted by space: ids and roles.
    static func digest(of memberships: [Membership]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for membership in memberships.sorted(by: { $0.space < $1.space }) {
            for byte in membership.space.utf8 + [0x1F] + membership.role.rawValue.utf8 + [0x1E] { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        }
        return hash
    }
}
