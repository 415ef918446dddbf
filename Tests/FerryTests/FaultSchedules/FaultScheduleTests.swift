import Foundation
import Testing

/// DESIGN.md's promise, tried on every run: whatever the faults, nothing is lost, doubled or
/// stuck. Each seed is one `FaultSchedule`; a failing seed prints the command that replays it.
@Suite("Fault schedules", .timeLimit(.minutes(20)))
struct FaultScheduleTests {
    /// Log lines printed with a failing seed (`FERRY_FUZZ_LOG`, default 30).
    static let logLines = ProcessInfo.processInfo.environment["FERRY_FUZZ_LOG"].flatMap { Int($0) } ?? 30

    /// The seeds CI runs on every run.
    static let ciSeeds: [UInt64] = Array(0..<200)

    /// `FERRY_FUZZ_SEEDS`: one seed (`17`), a list (`3,17,40`) or a range (`1000..<5000`, `1000-4999`).
    static func seeds(from text: String?) throws -> [UInt64] {
        guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return ciSeeds }
        for separator in ["..<", "-"] where text.contains(separator) {
            let bounds = text.components(separatedBy: separator).map { (bound: String) in
                UInt64(bound.trimmingCharacters(in: .whitespaces), radix: 10)
            }
            guard bounds.count == 2, let low = bounds[0], let high = bounds[1], low <= high else { break }
            return separator == "-" ? Array(low...high) : Array(low..<high)
        }
        let list = text.split(separator: ",").map { (item: Substring) in UInt64(item.trimmingCharacters(in: .whitespaces), radix: 10) }
        guard !list.isEmpty, list.allSatisfy({ $0 != nil }) else {
            throw ScheduleSeedsError(text: text)
        }
        return list.compactMap { $0 }
    }

    struct ScheduleSeedsError: Error, CustomStringConvertible {
        var text: String
        var description: String {
            "FERRY_FUZZ_SEEDS='\(text)' is not a seed: give one (17), a list (3,17,40) or a range (1000..<5000 or 1000-4999)"
        }
    }

    @Test(
        "every seeded schedule of writes, syncs, kills, restarts and network faults ends with every device equal to the server, each change applied once, nothing stuck"
    )
    func schedules() async throws {
        let seeds = try Self.seeds(from: ProcessInfo.processInfo.environment["FERRY_FUZZ_SEEDS"])
        var steps: [String: Int] = [:]
        var faults: [String: Int] = [:]
        var failed: [UInt64] = []
        // Two at a time: each schedule waits on the network and the disk much of its time.
        try await withThrowingTaskGroup(of: (UInt64, FaultSchedule.Outcome).self) { group in
            var pending = seeds.makeIterator()
            for _ in 0..<2 {
                if let seed = pending.next() { group.addTask { (seed, await FaultSchedule.run(seed: seed)) } }
            }
            while let (seed, outcome) = try await group.next() {
                if let seed = pending.next() { group.addTask { (seed, await FaultSchedule.run(seed: seed)) } }
                steps.merge(outcome.steps, uniquingKeysWith: +)
                faults.merge(outcome.faults, uniquingKeysWith: +)
                guard !outcome.problems.isEmpty else { continue }
                failed.append(seed)
                Issue.record(
                    Comment(
                        rawValue: """
                            fault schedule seed \(seed) failed:
                              \(outcome.problems.prefix(20).joined(separator: "\n  "))
                            its last steps:
                              \(outcome.log.suffix(Self.logLines).joined(separator: "\n  "))
                            replay it: FERRY_FUZZ_SEEDS=\(seed) swift test --filter FaultScheduleTests
                            """
                    )
                )
            }
        }
        let total = { (counts: [String: Int]) in counts.values.reduce(0, +) }
        print(
            """
            Fault schedules: \(seeds.count) seeds, \(failed.count) failed\(failed.isEmpty ? "" : " (\(failed.map(String.init).joined(separator: ",")))")
              steps (\(total(steps))): \(steps.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
              faults (\(total(faults))): \(faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            """
        )
    }

    @Test(
        "seeded schedules of two users sharing a space, with grants, removals, restarts and network faults, end with both devices equal to the server"
    )
    func spaceSchedules() async throws {
        let seeds = try Self.seeds(from: ProcessInfo.processInfo.environment["FERRY_FUZZ_SEEDS"]).prefix(100)
        var steps: [String: Int] = [:]
        var failed: [UInt64] = []
        for seed in seeds {
            let outcome = await SpaceFaultSchedule.run(seed: seed)
            steps.merge(outcome.steps, uniquingKeysWith: +)
            guard !outcome.problems.isEmpty else { continue }
            failed.append(seed)
            Issue.record(
                Comment(
                    rawValue: """
                        space fault schedule seed \(seed) failed:
                          \(outcome.problems.prefix(20).joined(separator: "\n  "))
                        its last steps:
                          \(outcome.log.suffix(Self.logLines).joined(separator: "\n  "))
                        replay it: FERRY_FUZZ_SEEDS=\(seed) swift test --filter FaultScheduleTests/spaceSchedules
                        """
                )
            )
        }
        print(
            "Space fault schedules: \(seeds.count) seeds, \(failed.count) failed; steps: "
                + steps.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        )
    }

    @Test(
        "seeded schedules of photos under eviction pressure, failing pushes and the janitor's days lose no photo a device still holds"
    )
    func photoSchedules() async throws {
        let seeds = try Self.seeds(from: ProcessInfo.processInfo.environment["FERRY_FUZZ_SEEDS"]).prefix(40)
        var failed: [UInt64] = []
        for seed in seeds {
            let problems: [String]
            do {
                problems = try await PhotoFaultSchedule(seed: seed).play()
            } catch {
                problems = ["the schedule stopped: \(error)"]
            }
            guard !problems.isEmpty else { continue }
            failed.append(seed)
            Issue.record(
                Comment(
                    rawValue: """
                        photo fault schedule seed \(seed) failed:
                          \(problems.prefix(20).joined(separator: "\n  "))
                        replay it: FERRY_FUZZ_SEEDS=\(seed) swift test --filter FaultScheduleTests/photoSchedules
                        """
                )
            )
        }
        print("Photo fault schedules: \(seeds.count) seeds, \(failed.count) failed")
    }
}
