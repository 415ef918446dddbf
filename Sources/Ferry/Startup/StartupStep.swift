/// One step of a ``StartupPipeline``.
public struct StartupStep: Sendable {
    /// Whether the pipeline can go on without the step.
    public enum Kind: Sendable, Equatable {
        /// The pipeline cannot go on without it (sign-in): it waits for the step, and a
        /// failure or timeout stops the pipeline until `start()` is called again.
        case blocking
        /// Nice to have (a permission, a location, a cache, the initial sync): a failure
        /// or timeout is recorded with its reason and the pipeline goes on.
        case optional
    }

    /// The step's work: it reports through the context, and throwing fails the step (blocking) or skips it (optional).
    public typealias Action = @Sendable (StartupStepContext) async throws -> Void

    /// Shown as the message when the step starts, and in ``StartupProgress/outcomes``.
    public let name: String
    /// Whether the pipeline stops when the step fails.
    public let kind: Kind
    /// This step's share of the progress bar, relative to the other steps' weights.
    public let weight: Double
    /// How long the step may run before it ends with ``StartupStepTimedOut``; `nil` (the default) for no limit.
    public let timeout: Duration?
    let action: Action

    /// A step that runs `action`; a negative `weight` is a programming error and traps.
    public init(_ name: String, kind: Kind, weight: Double = 1, timeout: Duration? = nil, action: @escaping Action) {
        precondition(weight >= 0, "a step's weight cannot be negative")
        self.name = name
        self.kind = kind
        self.weight = weight
        self.timeout = timeout
        self.action = action
    }

    /// A step the pipeline cannot go on without (see `Kind.blocking`).
    public static func blocking(_ name: String, weight: Double = 1, timeout: Duration? = nil, action: @escaping Action) -> StartupStep {
        StartupStep(name, kind: .blocking, weight: weight, timeout: timeout, action: action)
    }

    /// A step whose failure or timeout is recorded and passed over (see `Kind.optional`).
    public static func optional(_ name: String, weight: Double = 1, timeout: Duration? = nil, action: @escaping Action) -> StartupStep {
        StartupStep(name, kind: .optional, weight: weight, timeout: timeout, action: action)
    }
}

/// What a running step may tell the pipeline: a message for the user and how far along it is.
public struct StartupStepContext: Sendable {
    let update: @Sendable (_ message: String, _ fraction: Double?) async -> Void

    /// Shows `message` under the progress bar; `fraction` (0...1) moves the bar within this step's share.
    public func report(_ message: String, fraction: Double? = nil) async {
        await update(message, fraction.map { min(max($0, 0), 1) })
    }
}

/// A step that ran out of time.
public struct StartupStepTimedOut: Error, CustomStringConvertible {
    /// The step's time limit.
    public let timeout: Duration
    /// `timed out after` and the limit, as outcomes and logs show it.
    public var description: String { "timed out after \(timeout)" }
}
