import FerryProtocol
import Foundation
import Hummingbird
import NIOCore

/// Per-request state: Hummingbird's core context plus the authenticated user.
public struct FerryRequestContext: RequestContext {
    /// Hummingbird's core per-request state, as `RequestContext` requires.
    public var coreContext: CoreRequestContextStorage
    /// Set by `AuthMiddleware`; `nil` on unauthenticated routes.
    public var userID: String?
    /// Set by `AuthMiddleware` for a service token (`ferry_admin`).
    public var isService = false
    /// When the request's token expires (its `exp`), set by `AuthMiddleware`: an event stream ends then.
    public var tokenExpiry: Date?
    /// The protocol version the client speaks, set by `ClientVersionMiddleware` (its
    /// `Ferry-Protocol`, else `ProtocolVersion.first`): what an answer may hold for it.
    public var protocolVersion = ProtocolVersion.first
    /// Shared by every copy of this context, for the access log.
    let facts = RequestFacts()
    /// The connection: a handler closes its input when a body is too slow (`SyncController`).
    let channel: (any Channel)?

    /// A context for a new request, not yet authenticated.
    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
    }

    /// No body may exceed the protocol's push limit.
    public var maxUploadSize: Int { ProtocolLimits.maxPushBodyBytes }
}
