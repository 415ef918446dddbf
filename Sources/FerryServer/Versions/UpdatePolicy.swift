import FerryProtocol

/// The least client versions a server serves (PROTOCOL.md, "Versions"). A client below any
/// is answered `426 update_required` with what it lacks, and sends nothing more until its app
/// is updated. A client that does not say its app or schema version is below any minimum of
/// it: every app released before clients said so is. One that does not name its platform must
/// meet the app version of every platform.
public struct UpdatePolicy: Sendable, Equatable {
    /// The least protocol version served.
    public var protocolVersion: ProtocolVersion?
    /// The least app version served on every platform without a minimum of its own.
    public var appVersion: VersionNumber?
    /// The least app version on a platform (`ios`), over `appVersion` for a client that names it.
    public var appVersionByPlatform: [String: VersionNumber] = [:]
    /// The least schema version of the app served.
    public var schemaVersion: Int?
    /// What the refused are shown, written for a person; a default names what is too old.
    public var message: String?

    /// No minimum: every client is served.
    public init(
        protocolVersion: ProtocolVersion? = nil,
        appVersion: VersionNumber? = nil,
        appVersionByPlatform: [String: VersionNumber] = [:],
        schemaVersion: Int? = nil,
        message: String? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.appVersion = appVersion
        self.appVersionByPlatform = appVersionByPlatform
        self.schemaVersion = schemaVersion
        self.message = message
    }

    /// Whether any minimum is set.
    public var isEmpty: Bool { protocolVersion == nil && appVersion == nil && appVersionByPlatform.isEmpty && schemaVersion == nil }

    /// What the server requires of every client (for `/v1/health`); `nil` when nothing.
    var published: UpdateRequirement? {
        guard !isEmpty else { return nil }
        return UpdateRequirement(
            protocol: protocolVersion?.description,
            appVersion: appVersion?.description,
            schemaVersion: schemaVersion,
            appVersionByPlatform: appVersionByPlatform.isEmpty ? nil : appVersionByPlatform.mapValues(\.description)
        )
    }

    /// The least app version a client on `platform` must have; a client that names none, the
    /// most any platform asks, as it may be on any.
    func leastAppVersion(on platform: String?) -> VersionNumber? {
        if let platform { return appVersionByPlatform[platform] ?? appVersion }
        return ([appVersion].compactMap { $0 } + appVersionByPlatform.values).max()
    }

    /// The client as its headers describe it.
    struct Client: Equatable {
        var protocolVersion = ProtocolVersion.first
        var appVersion: VersionNumber?
        var schemaVersion: Int?
        var platform: String?
    }

    /// Why `client` is refused, and the minimum it fell short of; `nil` when it is served.
    func refusal(of client: Client) -> (message: String, minimum: UpdateRequirement)? {
        var minimum = UpdateRequirement()
        var short: [String] = []
        if let least = protocolVersion, client.protocolVersion < least {
            minimum.protocol = least.description
            short.append("protocol \(client.protocolVersion) is below \(least)")
        }
        if let least = leastAppVersion(on: client.platform), client.appVersion.map({ $0 < least }) ?? true {
            minimum.appVersion = least.description
            short.append("app version \(client.appVersion?.description ?? "(not said)") is below \(least)")
        }
        if let least = schemaVersion, client.schemaVersion.map({ $0 < least }) ?? true {
            minimum.schemaVersion = least
            short.append("schema version \(client.schemaVersion.map(String.init) ?? "(not said)") is below \(least)")
        }
        guard !short.isEmpty else { return nil }
        return (message ?? "This version of the app is too old to sync; please update it. (\(short.joined(separator: "; ")))", minimum)
    }
}
