import FerryProtocol
import Foundation

/// Who the app is, as every request says (`Ferry-App-Version`, `Ferry-Schema-Version`,
/// `Ferry-Platform`, beside the protocol's own `Ferry-Protocol`): what lets a server tell an
/// app too old to sync to update (``SyncStatus/updateRequired``) rather than fail it.
public struct AppIdentity: Sendable, Equatable {
    /// The app's version, `2.10.1`: one to four dotted whole numbers. By default the bundle's
    /// `CFBundleShortVersionString` when it is one; `nil` sends none (and a server that requires
    /// an app version then asks for an update).
    public var version: String?
    /// The version of the app's own schema (for example its number of migrations); `nil` sends none.
    public var schemaVersion: Int?
    /// The platform, lowercase: `ios`, `macos`, `watchos`, `tvos`, `visionos`, `linux`, … by default.
    public var platform: String?

    /// The bundle's version, no schema version, and the platform this build runs on.
    public init(
        version: String? = AppIdentity.bundleVersion,
        schemaVersion: Int? = nil,
        platform: String? = AppIdentity.currentPlatform
    ) {
        self.version = version
        self.schemaVersion = schemaVersion
        self.platform = platform
    }

    /// The main bundle's `CFBundleShortVersionString`, when it is a version the protocol takes.
    public static var bundleVersion: String? {
        (Bundle.main.infoDictionary?["CFBundleShortVersionString"] as? String).flatMap { VersionNumber($0)?.description }
    }

    /// The platform this build runs on.
    public static var currentPlatform: String {
        #if os(iOS)
        "ios"
        #elseif os(macOS)
        "macos"
        #elseif os(watchOS)
        "watchos"
        #elseif os(tvOS)
        "tvos"
        #elseif os(visionOS)
        "visionos"
        #elseif os(Android)
        "android"
        #elseif os(Linux)
        "linux"
        #elseif os(Windows)
        "windows"
        #else
        "other"
        #endif
    }

    /// The headers every request carries: the protocol this build speaks, and what the app says of itself.
    var headers: [String: String] {
        var headers = [ProtocolHeaders.protocolVersion: ProtocolVersion.current.description]
        if let version = version.flatMap(VersionNumber.init) { headers[ProtocolHeaders.appVersion] = version.description }
        // Only what the server takes: a header it refuses would fail every request with a 400.
        if let schemaVersion, ProtocolHeaders.schemaVersions.contains(schemaVersion) {
            headers[ProtocolHeaders.schemaVersion] = "\(schemaVersion)"
        }
        if let platform = platform.flatMap({ ProtocolHeaders.platformName($0.lowercased()) }) { headers[ProtocolHeaders.platform] = platform }
        return headers
    }
}

/// The server's answer to an app below its minimum version (`426 update_required`): the app
/// shows `message` and asks its user to update. Nothing is sent until then; every change stays
/// queued and goes once the updated app syncs.
public struct UpdateRequired: Sendable, Equatable {
    /// What to tell the user, from the server.
    public var message: String
    /// The versions the server requires (`UpdateRequirement`).
    public var minimum: UpdateRequirement
}
