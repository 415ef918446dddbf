/// Which space a record the `RecordWriter` writes belongs to.
enum SpacePlacement: Equatable {
    /// Not said: the row keeps the space it has (an explicitly enqueued change, a rekey of a
    /// row of this store). Nothing is checked against spaces.
    case unstated
    /// The user's personal space.
    case personal
    /// A shared space, by id.
    case shared(String)

    /// Where the server says a record is: `nil` is the personal space.
    init(server space: String?) {
        self = space.map(SpacePlacement.shared) ?? .personal
    }

    /// Whether the record's space is said, and so checked against the table's and the row's.
    var isStated: Bool { self != .unstated }

    /// The space's id; `nil` for the personal space and when unstated.
    var space: String? {
        if case .shared(let space) = self { space } else { nil }
    }

    /// The space as a message names it.
    var name: String {
        if case .shared(let space) = self { "space '\(space)'" } else { "the personal space" }
    }
}
