/// `POST /v1/push` request body.
public struct PushRequest: Sendable, Codable, Hashable {
    /// The pushing app install: 1 to 64 characters of `A-Z a-z 0-9 _ -`, one per installed app per user.
    public var clientID: String
    /// The batch, ids strictly increasing: at most 1000 mutations in a body of at most 4 MiB.
    public var mutations: [Mutation]

    /// A push of `mutations` from `clientID`.
    public init(clientID: String, mutations: [Mutation]) {
        self.clientID = clientID
        self.mutations = mutations
    }
}
