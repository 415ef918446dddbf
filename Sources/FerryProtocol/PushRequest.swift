/// `POST /v1/push` request body.
public struct PushRequest: Sendable, Codable, Hashable {
    public var clientID: String
    public var mutations: [Mutation]

    public init(clientID: String, mutations: [Mutation]) {
        self.clientID = clientID
        self.mutations = mutations
    }
}
