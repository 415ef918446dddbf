import FerryProtocol

/// How many requests a user may make per window: `--rate-limit N/SECONDS`.
public struct RateLimitPolicy: Sendable, Equatable, CustomStringConvertible {
    /// Requests allowed per window, all of them available at once as a burst.
    public let requests: Int
    /// The time in which an empty quota refills completely.
    public let window: Duration

    /// 300 requests per 60 seconds, PROTOCOL.md's default.
    public static let `default` = RateLimitPolicy(requests: 300, window: .seconds(60))

    /// The most requests a window may allow.
    public static let requestsRange = 1...1_000_000_000
    /// The longest window: a year, in seconds.
    public static let windowSecondsRange = 1...31_536_000

    /// A policy of `requests` per `window`: requests in ``requestsRange``, a window of at least a
    /// millisecond and at most a year (a program error otherwise: an empty quota never refills,
    /// and larger values make reset times no header can carry); ``RateLimitPolicy/parse(_:)``
    /// checks text given by a person.
    public init(requests: Int, window: Duration) {
        precondition(
            Self.requestsRange.contains(requests) && window >= .milliseconds(1) && window <= .seconds(Self.windowSecondsRange.upperBound),
            "a rate limit needs 1 to 1,000,000,000 requests per 1 ms to 1 year, not \(requests) per \(window)"
        )
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
        guard requestsRange.contains(requests), windowSecondsRange.contains(seconds) else { throw RateLimitPolicyError(text: text) }
        return RateLimitPolicy(requests: requests, window: .seconds(seconds))
    }

    /// Bytes a request may move (its body and its response's) for its one token; each further
    /// whole MiB costs another (`extraCost(bytes:)`), so a quota counts what requests cost,
    /// not only that they came: a 4 MiB push or pull page costs 5 requests, a small one 1.
    public static let bytesPerToken = 1 << 20

    /// The tokens a request that moved `bytes` costs beyond its first.
    public static func extraCost(bytes: Int) -> Int { max(0, bytes) / bytesPerToken }

    /// Tokens a bucket regains per second: the quota spread over the window.
    var refillPerSecond: Double { Double(requests) / window.seconds }

    /// The policy as `--rate-limit` takes it, `N/SECONDS` (a window of a fraction of a second
    /// shows its fraction, which `--rate-limit` does not take).
    public var description: String {
        let seconds = window.seconds
        return seconds == seconds.rounded() ? "\(requests)/\(Int(seconds))" : "\(requests)/\(seconds)"
    }
}

/// A `--rate-limit` value that is neither `N/SECONDS` with positive whole numbers nor `off`.
public struct RateLimitPolicyError: Error, Sendable, CustomStringConvertible {
    /// The value as given.
    public var text: String
    /// What is wrong with the value, and the forms that are accepted.
    public var description: String {
        "invalid rate limit '\(text)': use N/SECONDS with N from 1 to 1000000000 and SECONDS from 1 to 31536000 (a year), for example 300/60, or off"
    }
}
