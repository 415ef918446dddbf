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
/// It also carries the version of the user's memberships it was read with (`member_versions`,
/// moved by every grant, removal, change of role and deletion that concerns the user): a page
/// whose memberships are the same leaves them out, and a pull whose memberships did not change
/// and whose spaces hold nothing past its positions answers without reading them one by one.
struct PullPosition: Sendable, Equatable {
    var personal: PullCursor
    var spaces: [Int64: PullCursor] = [:]
    /// The version of the memberships the cursor was read with; 0 for a user never in a space.
    var memberships: Int64 = 0
    /// The space whose read the page stopped in, if it stopped in one: a space's first download
    /// goes on there, one statement a page on PostgreSQL, while the memberships stay the same.
    var continuing: Int64?

    init(personal: PullCursor, spaces: [Int64: PullCursor] = [:], memberships: Int64 = 0) {
        self.personal = personal
        self.spaces = spaces
        self.memberships = memberships
    }

    /// Whether a pull from this position finds nothing to read in any space, given what one
    /// statement read of the user's spaces in the head's history: the memberships' `version`
    /// and `count`, and the last position any of their rows holds or their tombstones were
    /// purged through (`last`). Only when every membership has an entry, none changed, every
    /// entry was read from this history (`ChangeHead`) and nothing lies past any of them;
    /// otherwise the spaces are read one by one, which decides exactly.
    func spacesUnchanged(version: Int64, count: Int, last: Int64, head: ChangeHead) -> Bool {
        guard version == memberships, count == spaces.count else { return false }
        return spaces.values.allSatisfy { entry in
            entry.epoch == head.epoch && max(entry.position, entry.head) <= head.position && last <= entry.position
        }
    }
}
