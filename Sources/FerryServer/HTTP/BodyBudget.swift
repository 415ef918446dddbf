import NIOConcurrencyHelpers

/// The bytes of request bodies this process holds at once, for every request together: a body
/// is counted as it arrives and given back when its request ends. Bodies held open just short of
/// complete by many users (each within their own per-request and per-user limits) cannot pin
/// more than `limit` bytes of memory; the next is answered `503` with `Retry-After`.
final class BodyBudget: Sendable {
    /// Most bytes of bodies held at once.
    let limit: Int
    private let held = NIOLockedValueBox(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// Counts `bytes` more, unless that would pass the limit.
    func take(_ bytes: Int) -> Bool {
        held.withLockedValue { held in
            guard held + bytes <= limit else { return false }
            held += bytes
            return true
        }
    }

    /// Gives `bytes` back.
    func give(_ bytes: Int) {
        held.withLockedValue { $0 -= bytes }
    }

    /// The bytes held now.
    var inFlight: Int { held.withLockedValue { $0 } }
}
