import FerryProtocol
import FerryRules
import Foundation

/// A side effect a rule asked for, as the push's transaction writes it to `side_effects`.
struct PendingEffect: Sendable, Equatable {
    /// Names the effect for good (`RuleJudge`); the table holds each key once.
    var key: String
    var kind: String
    /// The payload as stored: JSON text.
    var payload: Data

    /// `nil` when the payload holds a number JSON cannot (infinite, NaN).
    init?(key: String, effect: SideEffect) {
        var json = JSONTextWriter(capacity: 64)
        guard json.value(.object(effect.payload)) else { return nil }
        self.key = key
        kind = effect.kind
        payload = Data(json.bytes)
    }
}
