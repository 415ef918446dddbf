import Foundation
import Testing

@Suite("Package layout")
struct PackageLayoutTests {
    /// The repository's root, from this file's place in it.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("no two paths differ only in case, so the package checks out on a case-insensitive file system (macOS, Windows)")
    func noCaseCollisions() throws {
        var seen: [String: String] = [:]
        var collisions: [String] = []
        for folder in ["Sources", "Tests", "docs", "scripts"] {
            let enumerator = FileManager.default.enumerator(atPath: Self.root.appendingPathComponent(folder).path)
            while let path = enumerator?.nextObject() as? String {
                let full = folder + "/" + path
                if let other = seen[full.lowercased()], other != full { collisions.append("\(other) and \(full)") }
                seen[full.lowercased()] = full
            }
        }
        #expect(!seen.isEmpty)
        #expect(collisions.isEmpty, "\(collisions)")
    }
}
