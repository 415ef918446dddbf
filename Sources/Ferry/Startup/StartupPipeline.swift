import FerryProtocol
import Foundation
import Logging

/// An ordered start-up sequence with one progress bar: sign-in, permissions, a cache,
/// the initial sync. Blocking steps must succeed; optional ones that throw or time out
/// are recorded with why and skipped. `start()` while running does nothing; `reset()`
/// cancels the step in progress and returns to idle, so after a sign-out the app can
/// run the pipeline again from the top.
public actor StartupPipeline {
    private let steps: [StartupStep]
    /// Each step's share of the bar; they add up to 1.
    private let shares: [Double]
    private let clock: any Clock<Duration>
    private let logger = Logger(label: "ferry.startup")
    private var progress = StartupProgress()
    private let observers = Broadcast<StartupProgress>()
    private var runner: Task<Void, Never>?
    /// The step that runs next: where `start()` resumes after a blocking step failed.
    private var nextStep = 0
    /// Bumped by every `start()` and `reset()`, so a cancelled run cannot publish late.
    private var generation = 0

    /// A pipeline of `steps`, run in order, whose timeouts are measured on `clock`. Each step's share of the bar is its
    /// weight over the total (equal shares when the weights add up to 0).
    public init<C: Clock>(steps: [StartupStep], clock: C) where C.Duration == Duration {
        self.steps = steps
        let total = steps.map(\.weight).reduce(0, +)
        self.shares = steps.map { total > 0 ? $0.weight / total : 1 / Double(steps.count) }
        self.clock = clock
    }

    /// A pipeline of `steps` whose timeouts are measured on the continuous clock.
    public init(steps: [StartupStep]) {
        self.init(steps: steps, clock: ContinuousClock())
    }

    /// The current progress.
    public var current: StartupProgress { progress }

    /// Every change of progress, starting with the current one.
    public func progressUpdates() -> AsyncStream<StartupProgress> {
        observers.subscribe(startingWith: progress)
    }

    /// Runs the steps from where the pipeline stands, and returns at once; does nothing while
    /// running or once finished. `run()` or `completion()` waits for the end.
    public func start() {
        guard runner == nil, progress.phase != .finished else { return }
        generation += 1
        let generation = self.generation
        if nextStep < steps.count {  // running from the moment start() returns, not when the task gets a thread
            update(generation) {
                $0.phase = .running(step: steps[nextStep].name)
                $0.message = steps[nextStep].name
            }
        }
        runner = Task { await self.runSteps(generation) }
    }

    /// Starts the steps as `start()` does (joining the run in progress, if any) and returns
    /// when the run stops: `finished`, or `failed` at a blocking step (call again to retry it).
    /// A `reset()` meanwhile ends the wait with the pipeline idle.
    @discardableResult
    public func run() async -> StartupProgress {
        start()
        return await completion()
    }

    /// Waits until the run in progress (if any) stops, and returns where it stopped: finished,
    /// failed, or idle after a `reset()`. Cancelling the caller ends its wait at once (with the
    /// progress as it then is); the run goes on.
    @discardableResult
    public func completion() async -> StartupProgress {
        guard runner != nil else { return progress }
        let waitingSince = generation
        for await next in observers.subscribe(startingWith: progress) {
            switch next.phase {
            case .finished, .failed: return next
            case .idle where generation != waitingSince: return next  // reset() ended the run
            default: continue
            }
        }
        return progress  // cancelled
    }

    /// Cancels the step in progress and returns to idle, as if nothing had run.
    public func reset() async {
        generation += 1
        let current = runner
        runner = nil
        // Idle before the wait: a start() or completion() meanwhile sees the pipeline as reset,
        // and the old run, whose generation is gone, changes nothing more.
        nextStep = 0
        publish(StartupProgress())
        current?.cancel()
        await current?.value
    }

    // MARK: - Running

    private func runSteps(_ generation: Int) async {
        while nextStep < steps.count {
            let step = steps[nextStep]
            update(generation) {
                $0.phase = .running(step: step.name)
                $0.message = step.name
            }
            let result = await perform(step, generation)
            guard generation == self.generation else { return }
            switch result {
            case .success:
                record(step, .completed)
            case .failure(let error) where step.kind == .optional:
                let reason = String(describing: error)
                logger.debug("optional start-up step skipped", metadata: ["step": "\(step.name)", "reason": "\(reason)"])
                record(step, .skipped(reason))
            case .failure(let error):
                let reason = String(describing: error)
                logger.debug("blocking start-up step failed", metadata: ["step": "\(step.name)", "reason": "\(reason)"])
                record(step, .failed(reason))
                update(generation) { $0.phase = .failed(step: step.name, reason: reason) }
                runner = nil
                return
            }
            nextStep += 1
            let done = shares[..<nextStep].reduce(0, +)
            update(generation) { $0.fraction = done }
        }
        update(generation) {
            $0.phase = .finished
            $0.fraction = 1
            $0.message = "Ready"  // what a person reads at 100%, not an empty line
        }
        runner = nil
    }

    /// Runs one step, racing it against its timeout. The step runs in a task of its own so
    /// that a timeout or reset moves on at once, even if the step ignores cancellation.
    private func perform(_ step: StartupStep, _ generation: Int) async -> Result<Void, any Error> {
        let index = nextStep
        let context = StartupStepContext { [weak self] message, fraction in
            await self?.stepReported(message, fraction, step: index, generation)
        }
        do {
            try await withTimeLimit(step.timeout, clock: clock) { try await step.action(context) }
            return .success(())
        } catch let exceeded as TimeLimitExceeded {
            return .failure(StartupStepTimedOut(timeout: exceeded.limit))
        } catch {
            return .failure(error)  // CancellationError: reset() cancelled us
        }
    }

    private func stepReported(_ message: String, _ fraction: Double?, step index: Int, _ generation: Int) {
        guard case .running = progress.phase, index == nextStep else { return }  // a late word from a step that ended
        let base = shares[..<index].reduce(0, +)
        let share = shares[index]
        update(generation) {
            $0.message = message
            if let fraction { $0.fraction = base + share * fraction }
        }
    }

    private func record(_ step: StartupStep, _ outcome: StartupProgress.Outcome) {
        var next = progress
        next.outcomes.append((step.name, outcome))
        publish(next)
    }

    private func update(_ generation: Int, _ change: (inout StartupProgress) -> Void) {
        guard generation == self.generation else { return }
        var next = progress
        change(&next)
        publish(next)
    }

    private func publish(_ next: StartupProgress) {
        guard next != progress else { return }
        progress = next
        observers.send(next)
    }
}
