import FerryProtocol
import Foundation
import GRDB

/// What applying one push response did.
struct BatchOutcome: Sendable {
    var acknowledgedEntries = 0
    var deadLettered = 0
    var merged = 0
    var rekeyed = 0
    var conflicts = 0
    /// Each conflict and how the policy ended it, for the journal.
    var resolved: [ResolvedConflict] = []
    /// Entries answered as another holder's mutations, queued again to go under a new client id.
    var returnedToQueue = 0
    /// Entries refused for an attachment the server does not hold, queued again behind its upload.
    var waitingForAttachments = 0
    /// The client id the store gave up, the one it took, and why.
    var newClientID: (old: String, new: String, reason: String)?
}
