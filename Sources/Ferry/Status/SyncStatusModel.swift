#if canImport(Observation)
import Observation

/// The status as an `@Observable` object for SwiftUI: `Text(model.status.progressText)`.
/// It follows the client's status stream; nothing polls.
@MainActor
@Observable
public final class SyncStatusModel {
    /// The client's latest status, updated on the main actor.
    public private(set) var status = SyncStatus()

    /// Follows `client` for as long as this object lives.
    public init(client: FerryClient) {
        Task { [weak self] in
            for await status in await client.statusUpdates() {
                guard let self else { return }
                self.status = status
            }
        }
    }
}
#endif
