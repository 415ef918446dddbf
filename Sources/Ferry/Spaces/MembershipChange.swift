import FerryProtocol

/// A change of the signed-in user's memberships, as a pull learned it
/// (``FerryClient/membershipChanges()``): what an app awaits to show a space appearing, a role
/// changing, or a space going away, instead of comparing statuses.
public enum MembershipChange: Sendable, Equatable {
    /// The user can read a space they could not; the pull brings it whole.
    case joined(Membership)
    /// The user's role in a space changed (a writer made reader, say).
    case roleChanged(Membership, from: SpaceRole)
    /// The user can no longer read a space (removed, or the space deleted, or deleted and
    /// created again under its id): `rowsRemoved` rows left the store (rows of the app's that
    /// referenced them set aside included), and `deadLettered` queued changes became dead letters.
    case left(space: String, rowsRemoved: Int, deadLettered: Int)
}
