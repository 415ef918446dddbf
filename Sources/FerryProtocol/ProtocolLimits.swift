/// The numeric limits of PROTOCOL.md, version 1.
public enum ProtocolLimits {
    /// Highest mutation id: 2^53 - 1, the largest integer every JSON parser reads exactly.
    public static let maxMutationID: Int64 = 9_007_199_254_740_991
    public static let maxClientIDLength = 64
    public static let maxEntityIDLength = 128
    public static let maxNaturalKeyLength = 256
    /// Largest `data` object, measured once encoded as JSON.
    public static let maxDataBytes = 256 * 1024
    public static let maxMutationsPerPush = 1000
    public static let maxPushBodyBytes = 4 * 1024 * 1024
    public static let pullLimitRange = 1...1000
    public static let defaultPullLimit = 500
}

/// Header names used by the protocol beyond the standard ones.
public enum ProtocolHeaders {
    public static let rateLimitLimit = "RateLimit-Limit"
    public static let rateLimitRemaining = "RateLimit-Remaining"
    public static let rateLimitReset = "RateLimit-Reset"
    public static let retryAfter = "Retry-After"
}
