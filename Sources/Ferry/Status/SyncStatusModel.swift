#if canImport(Observation)
import Observation

/// The status as an `@Observable` object for SwiftUI: `Text(model.status.progressText)`.
/// It follows a status stream; nothing polls. Made from a session, it follows whoever is
/// signed in, across sign-ins, sign-outs and switches, so a view keeps one model for its life.
@MainActor
@Observable
public final class SyncStatusModel {
    /// The latest status, updated on the main actor.
    public private(set) var status = SyncStatus()
    // nonisolated(unsafe): written once, in the initializer on the main actor, and read once,
    // in deinit, when no other reference to the model is left.
    @ObservationIgnored private nonisolated(unsafe) var following: Task<Void, Never>?

    /// Follows the session's signed-in user, whoever that is, until this object is released.
    public init(session: SyncSession) {
        status = SyncStatus(phase: .signedOut)
        follow { session.statusUpdates() }
    }

    /// Follows one client until this object is released or the client stops (its user signed out).
    public init(client: FerryClient) {
        follow { await client.statusUpdates() }
    }

    private func follow(_ updates: @escaping @Sendable () async -> AsyncStream<SyncStatus>) {
        following = Task { [weak self] in
            for await status in await updates() {
                guard let self else { return }
                self.status = status
            }
        }
    }

    deinit {
        following?.cancel()
    }
}
#endif
