#if canImport(Observation)
import Observation

/// The pipeline's progress as an `@Observable` object for SwiftUI:
/// `ProgressView(value: model.progress.fraction) { Text(model.progress.message) }`.
@MainActor
@Observable
public final class StartupProgressModel {
    /// The pipeline's latest progress, updated on the main actor.
    public private(set) var progress = StartupProgress()
    // nonisolated(unsafe): written once, in the initializer on the main actor, and read once,
    // in deinit, when no other reference to the model is left.
    @ObservationIgnored private nonisolated(unsafe) var following: Task<Void, Never>?

    /// Follows `pipeline` until this object is released.
    public init(pipeline: StartupPipeline) {
        following = Task { [weak self] in
            for await progress in await pipeline.progressUpdates() {
                guard let self else { return }
                self.progress = progress
            }
        }
    }

    deinit {
        following?.cancel()
    }
}
#endif
