/// A version of the protocol, `major.minor`. Within a major version every change is additive
/// (PROTOCOL.md, "Versions"): a server speaks every minor version of its major one, and sends a
/// client only what the version it announced knows.
public struct ProtocolVersion: Sendable, Hashable, Comparable, LosslessStringConvertible {
    /// Changes only with a change old clients cannot follow.
    public var major: Int
    /// Rises with each additive change.
    public var minor: Int

    /// The version this build speaks; every request carries it as `Ferry-Protocol`.
    public static let current = ProtocolVersion(major: 1, minor: 1)
    /// The version of every client released before requests said which they speak: a request
    /// without `Ferry-Protocol` speaks it. The first frozen contract (`Tests/Contract/1.0`).
    public static let first = ProtocolVersion(major: 1, minor: 0)

    /// The version `major.minor`.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// Reads `1.1`: two whole numbers of at most nine digits, a dot between; `nil` for anything else.
    public init?(_ description: String) {
        let parts = description.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let major = VersionNumber.component(parts[0]), let minor = VersionNumber.component(parts[1]) else { return nil }
        self.init(major: major, minor: minor)
    }

    /// `1.1`, as `Ferry-Protocol` carries it.
    public var description: String { "\(major).\(minor)" }

    /// Older first: by major version, then minor.
    public static func < (a: Self, b: Self) -> Bool { (a.major, a.minor) < (b.major, b.minor) }
}

/// An app's version as people write it, `2.10.1`: one to four whole numbers with dots between,
/// compared number by number (`2.10` is after `2.9`; `2.1` and `2.1.0` are equal).
public struct VersionNumber: Sendable, Hashable, Comparable, LosslessStringConvertible {
    /// The numbers, most significant first.
    public let components: [Int]

    /// `nil` for anything but one to four dotted whole numbers of at most nine digits each.
    public init?(_ description: String) {
        let parts = description.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count) else { return nil }
        var components: [Int] = []
        for part in parts {
            guard let number = Self.component(part) else { return nil }
            components.append(number)
        }
        self.components = components
    }

    /// The numbers with dots between, without leading zeros: `2.10.1`.
    public var description: String { components.map(String.init).joined(separator: ".") }

    /// Equal when no number differs, missing numbers counting as 0: `2.1` equals `2.1.0`.
    public static func == (a: Self, b: Self) -> Bool { !(a < b) && !(b < a) }

    /// Hashes the numbers without trailing zeros, as equality compares them.
    public func hash(into hasher: inout Hasher) {
        var trimmed = components
        while trimmed.last == 0 { trimmed.removeLast() }
        hasher.combine(trimmed)
    }

    /// Older first, number by number.
    public static func < (a: Self, b: Self) -> Bool {
        for index in 0..<max(a.components.count, b.components.count) {
            let left = index < a.components.count ? a.components[index] : 0
            let right = index < b.components.count ? b.components[index] : 0
            if left != right { return left < right }
        }
        return false
    }

    /// One to nine ASCII digits, as a number.
    static func component(_ text: Substring) -> Int? {
        guard (1...9).contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }
}
