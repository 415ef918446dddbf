import FerryProtocol
import GRDB

/// Why the store refuses a write to a space it may only read (the guard triggers of
/// `ChangeCapture`, and ``FerryStore/enqueue(entity:entityID:op:data:naturalKey:space:)``).
enum SpaceGuard {
    /// Why a write to `space` is refused.
    static func message(space: String, role: String) -> String {
        "ferry: space '\(space)' is read-only for this user (role \(role)); the change was not made"
    }

    /// The guard triggers' refusal whatever the space (one made read-only since they were installed).
    static let genericMessage = "ferry: this space is read-only for this user (role read); the change was not made"

    /// Whether `error` is a guard trigger's refusal.
    static func isRefusal(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError, error.resultCode == .SQLITE_CONSTRAINT, let message = error.message else { return false }
        return message.hasPrefix("ferry: ") && message.hasSuffix("is read-only for this user (role read); the change was not made")
            || message == genericMessage
    }
}
