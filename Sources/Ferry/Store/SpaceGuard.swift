import FerryProtocol
import GRDB

/// Why the store refuses a write to a space it may only read (the guard triggers of
/// `ChangeCapture`, and ``FerryStore/enqueue(entity:entityID:op:data:naturalKey:space:)``).
enum SpaceGuard {
    /// Why a write to `space` is refused.
    static func message(space: String, role: String) -> String {
        "ferry: space '\(space)' is read-only for this user (role \(role)); the change was not made"
    }
}
