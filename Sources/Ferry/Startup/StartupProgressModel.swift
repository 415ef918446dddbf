#if canImport(Observation)
import Observation

/// The pipeline's progress as an `@Observable` object for SwiftUI:
/// `ProgressView(value: model.progress.fraction) { Text(model.progress.message) }`.
@MainActor
@Observable
public final class StartupProgressModel {
    /// The pipeline's latest progress, updated on the main actor.
    public private(set) var progress = StartupProgress()

    /// Follows `pipeline` for as long as this object lives.
    public init(pipeline: StartupPipeline) {
        Task { [weak self] in
            for await progress in await pipeline.progressUpdates() {
                guard let self else { return }
                self.progress = progress
            }
        }
    }
}
#endif
