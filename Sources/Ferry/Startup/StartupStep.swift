/// One step of a `StartupPipeline`.
public struct StartupStep: Sendable {
    public enum Kind: Sendable, Equatable {
        /// The pipeline cannot go on without it (sign-in): it waits for the step, and a
        /// failure or timeout stops the pipeline until `start()` is called again.
        case blocking
        /// Nice to have (a permission, a location, a cache, the initial sync): a failure
        /// or timeout is recorded with its reason and the pipeline goes on.
        case optional
    }

    public typealias Action = @Sendable (StartupStepContext) async throws -> Void

    public let name: String
    public let kind: Kind
    /// This step's share of the progress bar, relative to the other steps' weights.
    public let weight: Double
    public let timeout: Duration?
    let action: Action

    public init(_ name: String, kind: Kind, weight: Double = 1, timeout: Duration? = nil, action: @escaping Action) {
        precondition(weight >= 0, "a step's weight cannot be negative")
        self.name = name
        self.kind = kind
        self.weight = weight
        self.timeout = timeout
        self.action = action
    }

    public static func blocking(_ name: String, weight: Double = 1, timeout: Duration? = nil, action: @escaping Action) -> StartupStep {
        StartupStep(name, kind: .blocking, weight: weight, timeout: timeout, action: action)
    }

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
    public let timeout: Duration
    public var description: String { "timed out after \(timeout)" }
}
