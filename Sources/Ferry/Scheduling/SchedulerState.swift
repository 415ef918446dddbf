import Foundation

/// What a scheduler is doing about the triggers it holds: the in-memory half of "why is it
/// stuck?" (``QueueSnapshot/scheduler``).
public enum SchedulerState: Sendable, Equatable {
    /// No trigger is waiting and no run is going.
    case idle
    /// A run is going; `queued` triggers wait for the one after it.
    case running(queued: Int)
    /// `triggers` wait for the network to come back.
    case waitingForNetwork(triggers: Int)
    /// `triggers` wait for the settle window, which closes at `until`.
    case settling(triggers: Int, until: Date)
    /// `triggers` wait for the least time between runs (``SchedulerConfiguration/minimumInterval``)
    /// to pass, at `until`.
    case waitingForMinimumInterval(triggers: Int, until: Date)
    /// Runs are held since a background task's time ran out (``SyncSession/backgroundSync(timeLimit:)``);
    /// `triggers` wait until the app is active again (`setActive(true)`) or a caller waits for a run.
    case held(triggers: Int)
    /// The scheduler was stopped (its user signed out).
    case stopped
    /// The server requires an app update (``SyncStatus/updateRequired``): no run starts until
    /// the app is updated.
    case updateRequired

    /// The state in a sentence for people.
    public var explanation: String {
        switch self {
        case .idle: "The scheduler holds no trigger: the next write, a return to the app or a manual sync starts a run."
        case .running(let queued):
            queued == 0 ? "A sync is running." : "A sync is running; \(Self.triggers(queued)) for one more run after it."
        case .waitingForNetwork(let triggers):
            "Offline: \(Self.triggers(triggers)) for the network; the run starts when it returns."
        case .settling(let triggers, let until):
            "\(Self.triggers(triggers)) for the settle window; the run starts at \(until.formatted(.iso8601))."
        case .waitingForMinimumInterval(let triggers, let until):
            "\(Self.triggers(triggers)) for the least time between runs; the run starts at \(until.formatted(.iso8601))."
        case .held(let triggers):
            "Runs are held since a background task's time ran out; \(triggers == 0 ? "the next run starts" : Self.triggers(triggers) + ", and the run starts") when the app is active again."
        case .stopped: "The scheduler is stopped: nobody is signed in."
        case .updateRequired: "The server requires an update of the app: nothing is sent until it is updated; every change stays queued."
        }
    }

    /// "1 trigger waits", "3 triggers wait".
    private static func triggers(_ count: Int) -> String {
        count == 1 ? "1 trigger waits" : "\(count) triggers wait"
    }
}
