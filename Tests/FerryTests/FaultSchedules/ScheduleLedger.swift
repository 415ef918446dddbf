import Ferry
import FerryProtocol
import Foundation

/// What a fault schedule did and what the clients heard: every fault injected, and every push
/// result that reached a client (an answer lost on the way is not here). The end of a schedule
/// checks the server's versions against these results to prove each change applied once.
final class ScheduleLedger: @unchecked Sendable {
    // @unchecked: every stored property is only read and written under `lock`.

    /// One push result a client received, with what its mutation said.
    struct Answer: Equatable {
        var entity: String
        /// The record the mutation named; a merge answers with another (`result.entityID`).
        var sentEntityID: String
        var result: PushResult
    }

    struct MutationKey: Hashable {
        var user: String
        var clientID: String
        var mutationID: Int64
    }

    private let lock = NSLock()
    private var answers: [MutationKey: Answer] = [:]
    private var faults: [String: Int] = [:]
    private var problems: [String] = []
    private var lines: [String] = []

    /// Counts a fault and notes it in the log.
    func count(_ fault: String, _ detail: String) {
        lock.withLock {
            faults[fault, default: 0] += 1
            lines.append("  \(fault): \(detail)")
        }
    }

    /// The schedule's steps and faults, in order.
    func log(_ line: String) { lock.withLock { lines.append(line) } }
    var logLines: [String] { lock.withLock { lines } }

    var injectedFaults: [String: Int] { lock.withLock { faults } }
    var inconsistencies: [String] { lock.withLock { problems } }

    /// Records the results of a push answer that is about to reach the client.
    func delivered(user: String, process: String, request: TransportRequest, response: TransportResponse) {
        guard request.path == "/v1/push", response.status == 200, let body = request.body else { return }
        guard let push = try? PushRequest.decode(from: body), let reply = try? PushResponse.decode(from: response.body) else {
            lock.withLock { problems.append("a 200 push answer for \(user) could not be read") }
            return
        }
        let sent = Dictionary(push.mutations.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        lock.withLock {
            for result in reply.results {
                guard let mutation = sent[result.id] else {
                    problems.append("\(user): a result for mutation \(result.id), which the push did not carry")
                    continue
                }
                let key = MutationKey(user: user, clientID: push.clientID, mutationID: result.id)
                let answer = Answer(entity: mutation.entity, sentEntityID: mutation.entityID, result: result)
                lines.append(
                    "    \(process) heard #\(result.id) \(mutation.entity)/\(mutation.entityID)\(mutation.baseVersion.map { " over v\($0)" } ?? ""): "
                        + "\(result.status.rawValue)\(result.version.map { " v\($0)" } ?? "")\(result.entityID.map { $0 == mutation.entityID ? "" : " as \($0)" } ?? "")"
                )
                // Two copies of one store share a client id: the second to send an id hears it is
                // reused, or a duplicate; either claims nothing, and the other copy's answer is
                // the one that counts, whichever came first.
                // A conflict's `current`, a rewrite's and a rule's refusal's are the record as it is
                // when answered (PROTOCOL.md, rule 1 and "Rules"): the rest of the answer is the same.
                var same = result
                same.current = answers[key]?.result.current
                if let earlier = answers[key], result.status != .conflict, !result.claimsNothing, earlier.result != same,
                    !earlier.result.claimsNothing
                {
                    problems.append("\(user): mutation \(result.id) of \(push.clientID) was answered \(earlier.result) and later \(result)")
                }
                if answers[key].map({ $0.result.claimsNothing }) ?? true { answers[key] = answer }
            }
        }
    }

    /// Every answer clients heard about `record` (`entity/entityID`), in no particular order.
    func answers(about record: String, user: String) -> String {
        lock.withLock {
            answers.filter { key, answer in
                key.user == user
                    && ("\(answer.entity)/\(answer.sentEntityID)" == record || "\(answer.entity)/\(answer.result.entityID ?? "")" == record)
            }
            .map { key, answer in
                "\(key.clientID.suffix(4))#\(key.mutationID) \(answer.result.status.rawValue) v\(answer.result.version.map(String.init) ?? "-")"
            }
            .sorted().joined(separator: ", ")
        }
    }

    /// Checks that every version the server gave a record was written by one mutation whose
    /// answer some client heard, or is the side effect of one (a merge's tombstone of the
    /// mutation's own record), or hides behind a `duplicate` answer, which claims nothing.
    /// A mutation applied twice leaves a version nobody heard of; a lost change, a claimed
    /// version the server does not have.
    func exactlyOnceProblems(user: String, serverVersions: [String: Int64]) -> [String] {
        let answers = lock.withLock { self.answers.filter { $0.key.user == user }.map(\.value) }
        var claimed: [String: [Int64]] = [:]
        var explained: [String: Int] = [:]
        for answer in answers {
            let own = "\(answer.entity)/\(answer.sentEntityID)"
            switch answer.result.status {
            case .applied, .merged:
                if let version = answer.result.version, let id = answer.result.entityID {
                    claimed["\(answer.entity)/\(id)", default: []].append(version)
                    // The app's rule rewrote it: its own write follows the client's (PROTOCOL.md, "Rules").
                    if let current = answer.result.current, current.version > version { explained["\(answer.entity)/\(id)", default: 0] += 1 }
                }
                if answer.result.status == .merged { explained[own, default: 0] += 1 }
            case .duplicate:
                explained[own, default: 0] += 1
                if let id = answer.result.entityID { explained["\(answer.entity)/\(id)", default: 0] += 1 }
            case .conflict, .rejected:
                break
            }
        }
        var problems: [String] = []
        for (record, versions) in claimed {
            let distinct = Set(versions)
            if distinct.count != versions.count {
                problems.append("\(record): two mutations were both answered with one version (\(versions.sorted()))")
            }
            guard let server = serverVersions[record] else {
                problems.append("\(record): answered as written (versions \(versions.sorted())), but the server has no such record")
                continue
            }
            if let highest = distinct.max(), highest > server {
                problems.append("\(record): answered with version \(highest), but the server holds version \(server)")
            }
        }
        for (record, version) in serverVersions {
            let unheard = Int(version) - Set(claimed[record] ?? []).count
            if unheard > explained[record, default: 0] {
                problems.append(
                    "\(record): the server is at version \(version), but clients heard of \(claimed[record]?.count ?? 0) writes "
                        + "and \(explained[record, default: 0]) merges or duplicates: a change was applied more than once"
                )
            }
        }
        return problems.sorted()
    }
}

extension PushResult {
    /// A duplicate, or a rejection of a reused id: says nothing of what the mutation wrote.
    fileprivate var claimsNothing: Bool {
        status == .duplicate || (status == .rejected && code == PushResult.mutationIDReused)
    }
}
