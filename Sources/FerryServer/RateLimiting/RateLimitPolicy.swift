import FerryProtocol

/// How many requests a user may make per window: `--rate-limit N/SECONDS`.
public struct RateLimitPolicy: Sendable, Equatable, CustomStringConvertible {
    /// Requests allowed per window, all of them available at once as a burst.
    public let requests: Int
    /// The time in which an empty quota refills completely.
    public let window: Duration

    /// 300 requests per 60 seconds, PROTOCOL.md's default.
    public static let `default` = RateLimitPolicy(requests: 300, window: .seconds(60))

    /// A policy of `requests` per `window`. Both must be positive (a program error otherwise: an
    /// empty quota would never refill); ``RateLimitPolicy/parse(_:)`` checks text given by a person.
    public init(requests: Int, window: Duration) {
        precondition(requests > 0 && window > .zero, "a rate limit needs positive requests and window, not \(requests) per \(window)")
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

    /// The policy as `--rate-limit` takes it, `N/SECONDS` (a window of a fraction of a second
    /// shows its fraction, which `--rate-limit` does not take).
    public var description: String {
        let components = window.components
        return components.attoseconds == 0 ? "\(requests)/\(components.seconds)" : "\(requests)/\(window.seconds)"
    }
}

/// A `--rate-limit` value that is neither `N/SECONDS` with positive whole numbers nor `off`.
public struct RateLimitPolicyError: Error, Sendable, CustomStringConvertible {
    /// The value as given.
    public var text: String
    /// What is wrong with the value, and the forms that are accepted.
    public var description: String {
        "invalid rate limit '\(text)': use N/SECONDS with positive whole numbers (for example 300/60), or off"
    }
}
