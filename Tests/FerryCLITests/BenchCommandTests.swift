import FerryTestSupport
import Foundation
import Testing

/// `ferry bench`, run as the built binary at its smallest size: every benchmark it runs must
/// finish, so a run with no `--only` keeps working.
@Suite("ferry bench", .timeLimit(.minutes(2)))
struct BenchCommandTests {
    @Test("the client library's benchmarks in one run: merge's device and pull's fresh devices keep stores of their own")
    func clientBenchmarksInOneRun() async throws {
        let run = try await FerryProcess.run(["bench", "--records", "1000", "--only", "capture,drain,merge,sync,pull,relaunch", "--json"])
        #expect(run.status == 0, "\(run.error)")
        let report = try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any]
        let names = (report?["benchmarks"] as? [[String: Any]])?.compactMap { $0["name"] as? String }
        #expect(names == ["capture", "drain", "merge", "sync", "pull", "relaunch"])
    }

    @Test("a benchmark it does not know is refused before anything runs, and the ones it knows are listed")
    func unknownBenchmark() async throws {
        let run = try await FerryProcess.run(["bench", "--only", "drain,mrege"])
        #expect(run.status == 64)
        #expect(run.error.contains("--only: unknown benchmark 'mrege'; choose from capture, drain, merge,"), "\(run.error)")
        #expect(run.output.isEmpty)
    }
}
