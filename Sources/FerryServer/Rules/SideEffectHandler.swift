import FerryProtocol

/// The app's code that carries out the side effects its rules ask for (an email, a webhook),
/// after the push that asked has committed (``ServerConfiguration/sideEffects``).
///
/// An effect is delivered until `deliver` returns: one that throws is tried again later, with
/// backoff. Whatever fails (the handler, the network, the process killed mid-delivery), an
/// effect is never lost; it may be handed over again after a crash between its delivery and
/// its being marked done, always with the same ``DeliverableEffect/key``: pass it on as the
/// idempotency key of what the handler calls (or check it), and the effect happens once.
public protocol SideEffectHandler: Sendable {
    /// Carries out `effect`; throws to have it tried again later.
    func deliver(_ effect: DeliverableEffect) async throws
}

/// A side effect to carry out, as ``SideEffectHandler/deliver(_:)`` gets it.
public struct DeliverableEffect: Sendable, Equatable {
    /// Names the effect for good: the same on every delivery of it, in every process.
    public var key: String
    /// What to do: the rule's `SideEffect.kind`.
    public var kind: String
    /// What the handler needs: the rule's `SideEffect.payload`.
    public var payload: JSONObject
    /// Which delivery this is: 1 the first time.
    public var attempt: Int

    /// An effect from its fields.
    public init(key: String, kind: String, payload: JSONObject, attempt: Int) {
        self.key = key
        self.kind = kind
        self.payload = payload
        self.attempt = attempt
    }
}
