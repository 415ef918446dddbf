/// The numeric limits of PROTOCOL.md, version 1.
public enum ProtocolLimits {
    /// Highest mutation id: 2^53 - 1, the largest integer every JSON parser reads exactly.
    public static let maxMutationID: Int64 = 9_007_199_254_740_991
    /// Longest `clientID`, in characters (Unicode code points), all of them `A-Z a-z 0-9 _ -`.
    public static let maxClientIDLength = 64
    /// Longest `entityID`, in characters (Unicode code points).
    public static let maxEntityIDLength = 128
    /// Longest `naturalKey`, in characters (Unicode code points).
    public static let maxNaturalKeyLength = 256
    /// Largest `data` object, measured once encoded as JSON.
    public static let maxDataBytes = 256 * 1024
    /// Most mutations one push may carry; a larger batch is refused whole with `batch_too_large` (413).
    public static let maxMutationsPerPush = 1000
    /// The most digests one `POST /v1/attachments` asks about (``HeldAttachmentsRequest``).
    public static let maxDigestsPerLookup = 1000
    /// The most attachments one record may reference (`Mutation/attachments`).
    public static let maxAttachmentsPerRecord = 64
    /// Largest push body in bytes (4 MiB); a larger body is refused with `batch_too_large` (413).
    public static let maxPushBodyBytes = 4 * 1024 * 1024
    /// The values a pull's `limit` query parameter may take on a server that lists
    /// `large_pages` among its features (`GET /v1/health`); any other is a `bad_request`. A page
    /// is bounded by bytes all the same (``maxPullPageDataBytes``).
    public static let pullLimitRange = 1...10_000
    /// The largest `limit` every server takes: one without `large_pages` takes 1 to 1000.
    public static let pullLimitEveryServerTakes = 1000
    /// Most client ids a server keeps for one user; a push under one more is refused with
    /// `too_many_clients` (403) until idle ones are forgotten after the server's retention.
    public static let maxClientsPerUser = 1000
    /// The pull `limit` when the request gives none.
    public static let defaultPullLimit = 500
    /// Most bytes of record data one pull page carries (4 MiB): a page stops before the record
    /// that would pass it, except that its first record always goes, whatever its size.
    public static let maxPullPageDataBytes = 4 * 1024 * 1024
    /// Longest space id, in characters, all of them `a-z 0-9 _ -`.
    public static let maxSpaceIDLength = 64
    /// Most spaces a user may be a member of; one more is `too_many_spaces` (409).
    public static let maxSpacesPerUser = 1000
}

/// Header names used by the protocol beyond the standard ones.
public enum ProtocolHeaders {
    /// On every authenticated response: the quota per window.
    public static let rateLimitLimit = "RateLimit-Limit"
    /// On every authenticated response: requests left in the current window.
    public static let rateLimitRemaining = "RateLimit-Remaining"
    /// On every authenticated response: whole seconds until the quota is fully available again.
    public static let rateLimitReset = "RateLimit-Reset"
    /// On a 429 or 503: whole seconds to wait before the next request.
    public static let retryAfter = "Retry-After"
    /// On every request and the event stream: the protocol version the client speaks, `1.1`
    /// (``ProtocolVersion``); a request without it speaks ``ProtocolVersion/first``.
    public static let protocolVersion = "Ferry-Protocol"
    /// On every request, when the app says: its version, `2.10.1` (``VersionNumber``).
    public static let appVersion = "Ferry-App-Version"
    /// On every request, when the app says: the version of its own schema, a whole number.
    public static let schemaVersion = "Ferry-Schema-Version"
    /// On every request, when the app says: the platform it runs on (`ios`, `macos`, `android`, …),
    /// lowercase letters, digits and `-`, at most 32; a server may require a different app
    /// version on each.
    public static let platform = "Ferry-Platform"

    /// `text` as `Ferry-Platform` carries it: 1 to 32 of `a-z 0-9 -`; `nil` for anything else.
    public static func platformName(_ text: String) -> String? {
        guard (1...32).contains(text.utf8.count), text.utf8.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D })
        else { return nil }
        return text
    }

    /// `text` as `Ferry-Schema-Version` carries it: a whole number of one to nine digits.
    public static func schemaVersionNumber(_ text: String) -> Int? {
        guard (1...9).contains(text.utf8.count), text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }

    /// The schema versions `Ferry-Schema-Version` can carry.
    public static let schemaVersions = 0...999_999_999
}
