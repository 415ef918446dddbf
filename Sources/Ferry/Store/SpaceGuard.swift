import FerryProtocol
import GRDB

/// The SQL function the guard triggers of space tables call (`ChangeCapture`): it fails the
/// app's statement, and so its transaction, with a message naming the space and the role.
enum SpaceGuard {
    /// `ferry_refuse_write(space, role)`: always an error.
    static let refuseWrite = DatabaseFunction("ferry_refuse_write", argumentCount: 2, pure: false) { values in
        let space = String.fromDatabaseValue(values[0]) ?? "?"
        let role = String.fromDatabaseValue(values[1]) ?? "?"
        throw DatabaseError(resultCode: .SQLITE_CONSTRAINT, message: message(space: space, role: role))
    }

    /// Why a write to `space` is refused.
    static func message(space: String, role: String) -> String {
        "ferry: space '\(space)' is read-only for this user (role \(role)); the change was not made"
    }
}
