import Foundation

/// The store's client id as this process knows it: read when the store opens, changed when the
/// store takes a new one (`Outbox.apply`), and read again with every batch, which takes the id
/// from the file in the transaction that marks the batch in flight, so a change made by another
/// process on the same store is seen before the next push.
final class ClientIdentity: @unchecked Sendable {
    // @unchecked: `value` is read and written under `lock` only.
    private let lock = NSLock()
    private var value: String

    init(_ clientID: String) {
        value = clientID
    }

    var clientID: String {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }

    /// A new client id: `c-` and 20 random hexadecimal digits.
    static func newClientID() -> String {
        "c-" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
    }
}
