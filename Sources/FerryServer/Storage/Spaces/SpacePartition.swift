/// Where a space's records, change positions and purge horizon are kept: under a partition
/// name in the `user_id` columns, as a user's own are under their id. The name starts with
/// U+0001, which no user id may (`ProtocolValidation.userIDProblem`), and carries the space's
/// key, which is never reused: a space deleted and created again is a new partition, so a
/// cursor read from the old one can never pass over the new one's changes.
enum SpacePartition {
    /// The partition of the space with `key`.
    static func name(_ key: Int64) -> String { "\u{1}\(key)" }

    /// Who wrote a record state of a space: the client id and the user, since two users' clients
    /// may have the same id and one's answered writes must never hide the other's
    /// (``OwnWrites``). Client ids hold no space, so the pair reads back unambiguously.
    static func writer(clientID: String, userID: String) -> String { clientID + " " + userID }
}
