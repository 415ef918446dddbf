import Foundation

/// The id of a process that has ended: a store's sync lease naming it is held by nobody,
/// which is how a test plays an app that crashed while it held the lease.
public func deadProcessID() throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/true")
    try process.run()
    process.waitUntilExit()
    return process.processIdentifier
}
