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

    init(key: String, effect: SideEffect) {
        self.key = key
        kind = effect.kind
        var json = JSONTextWriter(capacity: 64)
        // Finite: `RuleJudge` refuses a write whose rule asked for a payload JSON cannot hold.
        _ = json.value(.object(effect.payload))
        payload = Data(json.bytes)
    }
}
