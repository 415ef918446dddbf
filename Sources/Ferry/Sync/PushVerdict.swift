import FerryProtocol
import Foundation

/// What one push answer means for the batch it answers, decided from the answer alone (no
/// database, no network), so every case has a synchronous test; the `Uploader` carries it out.
enum PushVerdict {
    /// 200: the results, one per mutation, to apply.
    case answered(PushResponse)
    /// 200 with a body that is not a push response: the batch goes back to the queue.
    case malformed(any Error)
    /// 408 for a batch of several: the body did not arrive within the server's body timeout
    /// (a slow link). Nothing was applied; smaller batches take less time each.
    case halveForSlowLink(message: String)
    /// 408 for one mutation: it is not at fault, so it stays queued for a later run (never a
    /// dead letter), and the upload ends so that the run's pull still brings others' changes.
    case waitForNextRun(message: String)
    /// Refused whole (a 413, or a 400 in the protocol's own words): split until the mutation at
    /// fault is alone, then dead-letter it with `reason`.
    case refusedWhole(reason: String)
    /// Anything else (a 400 from a proxy, a 5xx that outlived retries): the batch goes back to
    /// the queue and the run fails.
    case failed(message: String)

    init(_ response: TransportResponse, mutations: Int) {
        guard response.status != 200 else {
            do {
                self = .answered(try PushResponse.decode(from: response.body))
            } catch {
                self = .malformed(error)
            }
            return
        }
        let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body)
        let message = envelope?.error.message ?? "HTTP \(response.status)"
        switch response.status {
        case 408 where mutations > 1:
            self = .halveForSlowLink(message: message)
        case 408:
            self = .waitForNextRun(message: message)
        case 413:
            self = .refusedWhole(reason: "push answered 413: \(message)")
        // One from a proxy or a firewall may pass, so it is retried like any failure.
        case 400 where envelope?.code == .badRequest:
            self = .refusedWhole(reason: "push answered 400: \(message)")
        default:
            self = .failed(message: "push answered \(response.status): \(message)")
        }
    }
}
