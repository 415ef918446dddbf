import FerryProtocol
import Foundation

/// How a background sync ended, and whether the app should ask for another background task.
public struct BackgroundSyncResult: Sendable, Equatable {
    /// Why the background sync stopped.
    public enum Outcome: Sendable, Equatable {
        /// Nothing is left to send, and the last run pulled what the server had.
        case caughtUp
        /// The time limit came first; the run in progress was stopped cleanly.
        case timeLimitReached
        /// The task was cancelled first (the system's expiration handler); the run in progress
        /// was stopped cleanly.
        case expired
        /// The device is offline; the sync runs when the network returns.
        case offline
        /// A run failed, and why (the server unreachable after retries, credentials refused…).
        case failed(FerryError)
        /// The server requires an update of the app (``SyncStatus/updateRequired``): no run
        /// starts until it is updated, so another background task would do nothing.
        case updateRequired
        /// Nobody is signed in, or the user signed out meanwhile: there is nothing to sync.
        case signedOut
    }

    /// Why it stopped.
    public var outcome: Outcome
    /// Runs that finished during the background sync.
    public var runs: Int
    /// Changes the server has not acknowledged yet, counted in the store when it stopped.
    public var remaining: Int

    /// A result; `remaining` is counted in the store.
    public init(outcome: Outcome, runs: Int, remaining: Int) {
        self.outcome = outcome
        self.runs = runs
        self.remaining = remaining
    }

    /// Whether there is work for another background task: anything but caught up, or signed out.
    public var workRemains: Bool {
        switch outcome {
        case .caughtUp: remaining > 0
        case .signedOut, .updateRequired: false
        default: true
        }
    }
}

extension SyncSession {
    /// Syncs the signed-in user's data in a background task: runs (each a `backgroundTask`
    /// trigger, joined by any run already going) until nothing is left to send, until
    /// `timeLimit` passes on the session's clock, or until the calling task is cancelled
    /// (the system's expiration handler), whichever comes first. It never throws: the result
    /// says how it ended and whether work remains, so the app can ask for another task.
    ///
    /// When time runs out or the task is cancelled, the run in progress is stopped and awaited
    /// before this returns: the batch on the wire is answered or back in the queue, never left
    /// in flight while the app is suspended (a push the server applied is sent again later and
    /// applied once). Callers that had joined that run get ``FerryError/interrupted(_:)``. Then no run
    /// starts until the app is active again (`setActive(true)`) or something waits for a run
    /// (`sync()`); triggers that arrive meanwhile are kept for then. If the app became active
    /// while the background sync ran (`setActive(true)`), nothing is stopped or held: the run
    /// goes on in front of its user.
    ///
    /// Leave the system a margin: iOS gives an app refresh about 30 s, so ask for 25.
    public func backgroundSync(timeLimit: Duration) async -> BackgroundSyncResult {
        // The time limit counts from the call: a sign-in still opening its store takes from it.
        let transition = lastTransition
        let waited = await clientClock.measure { _ = await transition?.result }
        guard let engine else { return BackgroundSyncResult(outcome: .signedOut, runs: 0, remaining: 0) }
        let (scheduler, store, journal) = (engine.scheduler, engine.store, engine.client.journal)
        let runs = RunCounter()
        let activation = await scheduler.activations
        let outcome: BackgroundSyncResult.Outcome
        var stoppedHere = false  // this call's time ran out, or its task was cancelled: it stops the run
        do {
            try await withTimeLimit(max(timeLimit - waited, .zero), clock: clientClock) {
                repeat {
                    try await scheduler.run(for: .backgroundTask)
                    await runs.add()
                } while try await Outbox.counts(in: store).pending > 0
            }
            outcome = .caughtUp
        } catch {
            switch error {
            case is TimeLimitExceeded:
                outcome = .timeLimitReached
                stoppedHere = true
            case is CancellationError:
                outcome = .expired
                stoppedHere = true
            case _ where await scheduler.state == .stopped: outcome = .signedOut  // signed out meanwhile, whatever the error
            case FerryError.Code.updateRequired: outcome = .updateRequired
            case FerryError.Code.interrupted: outcome = .timeLimitReached  // another background sync's time ran out; it holds
            case FerryError.Code.unreachable where await scheduler.state.isWaitingForNetwork: outcome = .offline
            default: outcome = .failed(FerryError(wrapping: error))
            }
        }
        // In a task of its own: when the system cancelled us, the store still has to be read
        // and the journal written (GRDB refuses both to a cancelled task).
        return await Task {
            if stoppedHere { await scheduler.hold(unlessActivatedAfter: activation) }
            let remaining = (try? await Outbox.counts(in: store).pending) ?? 0
            let result = BackgroundSyncResult(outcome: outcome, runs: await runs.count, remaining: remaining)
            await journal.record(result.journalEvent)
            return result
        }.value
    }
}

extension BackgroundSyncResult {
    /// The result as the journal records it.
    var journalEvent: JournalEvent {
        let how =
            switch outcome {
            case .caughtUp: "caught up"
            case .timeLimitReached: "stopped at its time limit; runs are held until the app is active"
            case .expired: "stopped by the system (expired); runs are held until the app is active"
            case .offline: "offline"
            case .failed(let why): "failed: \(why)"
            case .updateRequired: "the server requires an update of the app"
            case .signedOut: "signed out"
            }
        return JournalEvent(
            kind: .background,
            message: "background sync \(how) after \(runs) run\(runs == 1 ? "" : "s"); \(remaining) changes remain",
            details: [.runs: "\(runs)", .remaining: "\(remaining)", .workRemains: "\(workRemains)"]
        )
    }
}

extension SchedulerState {
    var isWaitingForNetwork: Bool {
        if case .waitingForNetwork = self { true } else { false }
    }
}

/// Runs finished inside the time-limited work, read after it was cancelled.
private actor RunCounter {
    private(set) var count = 0
    func add() { count += 1 }
}
