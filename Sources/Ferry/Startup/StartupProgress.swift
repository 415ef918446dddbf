/// Where a `StartupPipeline` is, in one value that observers receive on every change.
public struct StartupProgress: Sendable, Equatable {
    public enum Phase: Sendable, Equatable {
        case idle
        case running(step: String)
        /// Every step has run (optional ones may have been skipped: see `outcomes`).
        case finished
        /// A blocking step failed or timed out; `start()` tries again from that step.
        case failed(step: String, reason: String)
    }

    public enum Outcome: Sendable, Equatable, CustomStringConvertible {
        case completed
        /// An optional step that threw or timed out, and why.
        case skipped(String)
        /// A blocking step that threw or timed out, and why.
        case failed(String)

        public var description: String {
            switch self {
            case .completed: "completed"
            case .skipped(let why): "skipped (\(why))"
            case .failed(let why): "failed (\(why))"
            }
        }
    }

    public var phase: Phase = .idle
    /// 0...1 over the whole pipeline, by the steps' weights.
    public var fraction: Double = 0
    /// What the current step says it is doing.
    public var message = ""
    /// Each step that has ended, in order, with what became of it.
    public var outcomes: [(step: String, outcome: Outcome)] = []

    public init() {}

    public static func == (lhs: StartupProgress, rhs: StartupProgress) -> Bool {
        lhs.phase == rhs.phase && lhs.fraction == rhs.fraction && lhs.message == rhs.message
            && lhs.outcomes.elementsEqual(rhs.outcomes) { $0.step == $1.step && $0.outcome == $1.outcome }
    }
}
