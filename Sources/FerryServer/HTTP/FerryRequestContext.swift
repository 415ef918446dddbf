import Hummingbird

/// Per-request state: Hummingbird's core context plus the authenticated user.
public struct FerryRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by `AuthMiddleware`; `nil` on unauthenticated routes.
    public var userID: String?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }

    /// Push bodies are collected by the push handler itself, against the protocol's limit.
    public var maxUploadSize: Int { 0 }
}
