import Foundation

/// Fresh directories for test stores and server databases.
///
/// All of a test process's directories live under one root that is removed when the
/// process exits, so test runs do not pile up folders in the temporary directory. A crashed
/// run leaves its root behind (named with its process id) for inspection.
public enum TestDirectory {
    private static let root: URL = {
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-tests-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))")
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        // Runs after `root` is initialized, so reading it there does not initialize it again.
        atexit { try? FileManager.default.removeItem(at: TestDirectory.root) }
        return root
    }()

    /// A new, empty directory.
    public static func make(_ name: String) -> URL {
        let directory = root.appendingPathComponent("\(name)-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }
}
