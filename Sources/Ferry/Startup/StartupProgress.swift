/// Where a ``StartupPipeline`` is, in one value that observers receive on every change.
public struct StartupProgress: Sendable, Equatable {
    /// Where the pipeline is in its run.
    public enum Phase: Sendable, Equatable {
        /// Not started, or reset.
        case idle
        /// The step of this name is running.
        case running(step: String)
        /// Every step has run (optional ones may have been skipped: see `outcomes`).
        case finished
        /// A blocking step failed or timed out; `start()` tries again from that step.
        case failed(step: String, reason: String)
    }

    /// What became of one step.
    public enum Outcome: Sendable, Equatable, CustomStringConvertible {
        /// The step succeeded.
        case completed
        /// An optional step that threw or timed out, and why.
        case skipped(String)
        /// A blocking step that threw or timed out, and why.
        case failed(String)

        /// The outcome in words: `completed`, `skipped (why)` or `failed (why)`.
        public var description: String {
            switch self {
            case .completed: "completed"
            case .skipped(let why): "skipped (\(why))"
            case .failed(let why): "failed (\(why))"
            }
        }
    }

    /// Where the pipeline is; `idle` before `start()` and after `reset()`.
    public var phase: Phase = .idle
    /// 0...1 over the whole pipeline, by the steps' weights.
    public var fraction: Double = 0
    /// What the current step says it is doing.
    public var message = ""
    /// Each step that has ended, in order, with what became of it.
    public var outcomes: [(step: String, outcome: Outcome)] = []

    /// The progress of a pipeline that has not started: idle, at 0, with no message and no outcomes.
    public init() {}

    /// Equal when the phase, the fraction, the message and every outcome are.
    public static func == (lhs: StartupProgress, rhs: StartupProgress) -> Bool {
        lhs.phase == rhs.phase && lhs.fraction == rhs.fraction && lhs.message == rhs.message
            && lhs.outcomes.elementsEqual(rhs.outcomes) { $0.step == $1.step && $0.outcome == $1.outcome }
    }
}
