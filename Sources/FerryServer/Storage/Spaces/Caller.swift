/// Who makes a request, as the storage judges it: a user, or an app's backend with a service
/// token (`ferry_admin`), which administers every space and is a member of none.
public struct Caller: Sendable, Equatable {
    /// The token's `sub`.
    public var userID: String
    /// Whether the token is a service token.
    public var isService: Bool

    /// A caller from its fields.
    public init(userID: String, isService: Bool = false) {
        self.userID = userID
        self.isService = isService
    }
}
