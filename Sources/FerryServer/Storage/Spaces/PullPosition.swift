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
struct PullPosition: Sendable, Equatable {
    var personal: PullCursor
    var spaces: [Int64: PullCursor] = [:]

    init(personal: PullCursor, spaces: [Int64: PullCursor] = [:]) {
        self.personal = personal
        self.spaces = spaces
    }
}
