import FerryProtocol
import Hummingbird

/// Per-request state: Hummingbird's core context plus the authenticated user.
public struct FerryRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by `AuthMiddleware`; `nil` on unauthenticated routes.
    public var userID: String?
    /// Shared by every copy of this context, for the access log.
    let facts = RequestFacts()

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }

    /// No body may exceed the protocol's push limit.
    public var maxUploadSize: Int { ProtocolLimits.maxPushBodyBytes }
}
