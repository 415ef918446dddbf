import FerryProtocol

/// How many requests a user may make per window: `--rate-limit N/SECONDS`.
public struct RateLimitPolicy: Sendable, Equatable, CustomStringConvertible {
    public var requests: Int
    public var window: Duration

    public static let `default` = RateLimitPolicy(requests: 300, window: .seconds(60))

    public init(requests: Int, window: Duration) {
        self.requests = requests
        self.window = window
    }

    /// Parses `N/SECONDS` (for example `300/60`); `nil` for `off`.
    public static func parse(_ text: String) throws(RateLimitPolicyError) -> RateLimitPolicy? {
        if text.lowercased() == "off" { return nil }
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let requests = Int(parts[0]), let seconds = Int(parts[1]) else {
            throw RateLimitPolicyError(text: text)
        }
        guard requests > 0, seconds > 0 else { throw RateLimitPolicyError(text: text) }
        return RateLimitPolicy(requests: requests, window: .seconds(seconds))
    }

    /// Tokens a bucket regains per second: the quota spread over the window.
    var refillPerSecond: Double { Double(requests) / window.seconds }

    public var description: String { "\(requests)/\(window.components.seconds)" }
}

public struct RateLimitPolicyError: Error, Sendable, CustomStringConvertible {
    public var text: String
    public var description: String {
        "invalid rate limit '\(text)': use N/SECONDS with positive whole numbers (for example 300/60), or off"
    }
}
