import Synchronization

/// What the layers of one request learn about it (the user from authentication, the client
/// id from a push body or the `Ferry-Client-ID` header), kept for the access log, which
/// sees the request only from outside. Request contexts are copied from layer to layer;
/// they all share this one instance.
final class RequestFacts: Sendable {
    private let state = Mutex<(user: String?, client: String?, bodyBytes: Int)>((nil, nil, 0))

    var user: String? {
        get { state.withLock { $0.user } }
        set { state.withLock { $0.user = newValue } }
    }

    var client: String? {
        get { state.withLock { $0.client } }
        set { state.withLock { $0.client = newValue } }
    }

    /// Bytes of the request's body read, for what the request costs (`RateLimitMiddleware`),
    /// whatever the answer: a refused upload read its bytes too.
    var bodyBytes: Int {
        get { state.withLock { $0.bodyBytes } }
        set { state.withLock { $0.bodyBytes = newValue } }
    }

    /// Counts `count` more bytes of the body read (an upload's, as they arrive).
    func received(_ count: Int) {
        state.withLock { $0.bodyBytes += count }
    }
}
