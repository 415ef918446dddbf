import Ferry
import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

/// `ferry client attach` and `fetch`, run as the built binary against a live server.
@Suite("ferry client attach and fetch", .timeLimit(.minutes(1)))
struct ClientAttachmentCommandTests {
    @Test("a photo attached on one store reaches another through sync and fetch, byte for byte; bad input changes nothing")
    func attachSyncFetch() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: FerryProcess.binary.path), "build the ferry executable first (swift build)")
        try await TestServer.run { server in
            let scratch = TestDirectory.make("cli-attach")
            let token = try await TestServer.token(for: "alice")
            let field = ["--store", scratch.appendingPathComponent("field").path, "--user", "alice"]
            let office = ["--store", scratch.appendingPathComponent("office").path, "--user", "alice"]
            let remote = ["--server", server.baseURL, "--token", token]
            let photo = scratch.appendingPathComponent("photo.jpg")
            let bytes = Data((0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })
            try bytes.write(to: photo)

            var run = try await FerryProcess.run(["client", "attach"] + field + ["--file", scratch.appendingPathComponent("none.jpg").path])
            #expect(run.status != 0 && run.error.contains("is not a file"))
            run = try await FerryProcess.run(["client", "attach"] + field + ["--file", photo.path, "--content-type", "image/jpeg"])
            #expect(run.status == 0, "\(run.error)")
            let digest = run.output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(AttachmentDigest(digest) != nil, "\(run.output)")
            run = try await FerryProcess.run(
                ["client", "add"] + field + ["--entity", "jobs", "--id", "j1", "--data", #"{"title": "roof", "photo": "\#(digest)"}"#]
            )
            #expect(run.status == 0, "\(run.error)")
            run = try await FerryProcess.run(
                ["client", "add"] + field + ["--entity", "jobs", "--id", "j2", "--data", #"{"photo": "not a digest"}"#]
            )
            #expect(run.status != 0 && run.error.contains("holds attachment digests"), "\(run.error)")
            run = try await FerryProcess.run(["client", "inspect"] + field)
            #expect(run.output.contains("\(digest)") && run.output.contains("waiting for upload"), "\(run.output)")
            run = try await FerryProcess.run(["client", "sync"] + field + remote)
            #expect(run.status == 0, "\(run.output) \(run.error)")

            run = try await FerryProcess.run(["client", "sync"] + office + remote)
            #expect(run.status == 0, "\(run.error)")
            let out = scratch.appendingPathComponent("fetched.jpg")
            run = try await FerryProcess.run(["client", "fetch"] + office + remote + ["--out", out.path, "sha256:nope"])
            #expect(run.status != 0 && run.error.contains("is not an attachment digest"))
            run = try await FerryProcess.run(["client", "fetch"] + office + remote + ["--out", out.path, digest])
            #expect(run.status == 0, "\(run.error)")
            #expect(try Data(contentsOf: out) == bytes)
            run = try await FerryProcess.run(["client", "fetch"] + office + remote + ["--out", out.path, digest])
            #expect(run.status != 0 && run.error.contains("exists"))
            run = try await FerryProcess.run(["client", "inspect"] + office + ["--json"])
            #expect(run.output.contains(#""waitsForUpload":false"#), "\(run.output)")
        }
    }
}
