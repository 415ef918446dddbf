import Foundation

/// Runs `work`, which blocks (opening or closing a store waits for another process's lock or
/// for reads in progress, which may themselves need a Swift concurrency thread), on a dispatch
/// queue of its own, never on one of the few cooperative threads (two on a 2-core machine).
func offCooperativeThreads<T: Sendable>(_ label: String, _ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue(label: label).async { continuation.resume(with: Result { try work() }) }
    }
}
