import FerryProtocol
import FerryRules
import FerryServer
import Foundation

/// `ferry bench --only rules`: what the app's rules cost a push (issue 53). A push of 1,000
/// mutations whose rule reads one other record each and rewrites each write, against the same
/// push without rules, and with rules that judge none of its entities; on the storage itself (no
/// HTTP, so the figure is the rules' own), the median of `rounds`.
struct RulesBench {
    /// Where the server's records live: PostgreSQL, or a SQLite file in `folder`.
    var postgres: PostgresLocation?
    var mutations = ProtocolLimits.maxMutationsPerPush
    var rounds = 5

    /// Each job names its customer, who must exist; the server sets `updated_by`.
    struct CustomerRule: WriteRule {
        let entities: Set<String>

        func reads(for write: ProposedWrite) -> [RecordRef] {
            (write.data?["customer"]?.stringValue).map { [RecordRef(entity: "customers", entityID: $0)] } ?? []
        }

        func decide(_ write: ProposedWrite, reads: RuleReads) throws -> RuleDecision {
            guard var data = write.data else { return .accept }
            guard (data["customer"]?.stringValue).flatMap({ reads.data(of: RecordRef(entity: "customers", entityID: $0)) }) != nil else {
                return .reject(code: "unknown_customer", message: "No such customer.")
            }
            data["updated_by"] = .string(write.user)
            return .rewrite(data)
        }
    }

    func run(in folder: URL) async throws -> [String] {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let storage: any SyncStorage =
            if let postgres { try await PostgresSyncStorage.connect(to: postgres) } else {
                try SQLiteSyncStorage(path: folder.appendingPathComponent("rules.sqlite").path)
            }
        defer { Task { [storage] in try? await storage.close() } }
        let run = UUID().uuidString.prefix(6).lowercased()
        let variants: [(name: String, rules: ServerRules)] = [
            ("without rules", ServerRules()),
            ("rules judging none of its entities", ServerRules([CustomerRule(entities: ["invoices"])])),
            ("a rule reading one record each", ServerRules([CustomerRule(entities: ["jobs"])])),
        ]
        var medians: [BenchMeasurement] = []
        for variant in variants {
            var timed: [BenchMeasurement] = []
            for round in 0..<rounds {
                let caller = Caller(userID: "\(run)-\(medians.count)-\(round)")
                let customers = (1...mutations).map {
                    Mutation.upsert(id: Int64($0), entity: "customers", entityID: "c\($0)", data: ["name": .string("Customer \($0)")])
                }
                _ = try await storage.push(caller: caller, clientID: "seed", mutations: customers.map { IncomingMutation($0) })
                let jobs = (1...mutations).map {
                    IncomingMutation(
                        Mutation.upsert(
                            id: Int64($0),
                            entity: "jobs",
                            entityID: "j\($0)",
                            data: ["customer": .string("c\($0)"), "title": .string("Roof")]
                        )
                    )
                }
                timed.append(
                    try await BenchMeasurement.measure(items: mutations) {
                        let response = try await storage.push(caller: caller, clientID: "phone", mutations: jobs, rules: variant.rules)
                        guard response.results.allSatisfy({ $0.status == .applied }) else { throw CommandFailure("a job was not applied") }
                        return (1, nil)
                    }
                )
            }
            medians.append(.median(timed))
        }
        let base = medians[0].seconds
        var lines = ["rules: a push of \(mutations) mutations, on \(postgres == nil ? "SQLite" : "PostgreSQL"), median of \(rounds)"]
        for (variant, median) in zip(variants, medians) {
            lines.append(
                String(
                    format: "  %@: %.1f ms (%.0f mutations/s, %.2fx without rules), peak %.0f MB",
                    variant.name,
                    median.seconds * 1000,
                    median.throughput,
                    median.seconds / base,
                    median.peakMemoryMB ?? 0
                )
            )
        }
        return lines
    }
}
