import FerryProtocol
import FerryTestSupport
import Foundation
import NIOCore
import Testing

@testable import FerryServer

/// Seeded interleavings of one user's uploads across two server processes on one store (issue
/// 50): appends of true and of other bytes, some held open at an offset while others go on,
/// completions, discards, purges and reads, on either process, in any order the seed gives. The
/// invariant, after every step and at the end: whatever a store names by a digest hashes to it.
@Suite("Attachment fault schedules", .timeLimit(.minutes(10)))
struct BlobFaultScheduleTests {
    /// Seeds per store; `FERRY_FUZZ_SEEDS` (as the client's schedules) replays some.
    static func seeds() throws -> [UInt64] {
        let given = ProcessInfo.processInfo.environment["FERRY_FUZZ_SEEDS"]
        return given == nil ? Array(0..<12) : try FaultScheduleSeeds.parse(given)
    }

    @Test(
        "any interleaving of appends, completions, discards and purges across two processes never names wrong bytes",
        arguments: BlobBackend.allCases
    )
    func schedules(blobs kind: BlobBackend) async throws {
        var failed: [String] = []
        for seed in try Self.seeds() {
            let problems = try await BlobSchedule(seed: seed, kind: kind).play()
            if !problems.isEmpty { failed.append("seed \(seed): \(problems.prefix(5).joined(separator: "; "))") }
        }
        #expect(failed.isEmpty, "\(failed.joined(separator: "\n")) (replay: FERRY_FUZZ_SEEDS=N swift test --filter BlobFaultScheduleTests)")
    }
}

/// Parses `FERRY_FUZZ_SEEDS` as the client's fault schedules do: `17`, `3,17,40`, `10..<20` or `10-19`.
enum FaultScheduleSeeds {
    static func parse(_ text: String?) throws -> [UInt64] {
        let text = (text ?? "").trimmingCharacters(in: .whitespaces)
        for separator in ["..<", "-"] where text.contains(separator) {
            let bounds = text.components(separatedBy: separator).compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
            guard bounds.count == 2, bounds[0] <= bounds[1] else { break }
            return separator == "-" ? Array(bounds[0]...bounds[1]) : Array(bounds[0]..<bounds[1])
        }
        let list = text.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        guard !list.isEmpty else { throw TestFailure("FERRY_FUZZ_SEEDS='\(text)' is not a seed, a list or a range") }
        return list
    }
}

/// One seeded schedule: two stores on one folder or prefix stand for two server processes.
struct BlobSchedule {
    let seed: UInt64
    let kind: BlobBackend
    static let partBytes = 5 * 1024 * 1024

    /// Two processes on one store: two S3 stores on one prefix, or, for a folder, one store
    /// (processes sharing a folder are not supported; its interleavings are one process's tasks).
    func processes() async throws -> [any BlobStore] {
        switch kind {
        case .s3:
            let (first, second) = try await S3BlobStoreTests.twoProcesses()
            return [first, second]
        case .file:
            let store = try await kind.make()
            return [store, store]
        }
    }

    func play() async throws -> [String] {
        var random = SeededRandom(seed: seed)
        let stores = try await processes()
        // Two files: the true bytes of the digest, and other bytes of the same length (a hostile
        // user's, or a client's stale retry).
        let size = Int.random(in: 1...3, using: &random) * Self.partBytes + Int.random(in: 0..<1000, using: &random)
        let truth = S3BlobStoreTests.bytes(size, seed: Int(seed % 1000) + 1)
        let other = S3BlobStoreTests.bytes(size, seed: Int(seed % 1000) + 2)
        let digest = FileBlobStoreTests.digest(truth)
        let upload = UploadID()
        var problems: [String] = []
        // Appends past their offset check, waiting for their bytes, which land at a later step.
        var held: [(feed: AsyncStream<ByteBuffer>.Continuation, bytes: ByteBuffer, task: Task<Int64, any Error>)] = []

        func check(_ when: String) async {
            do {
                guard let stored = try await stores[0].size(of: digest) else { return }
                let bytes = try await S3BlobStoreTests.read(digest, 0..<stored, from: stores[Int.random(in: 0..<2, using: &random)])
                if FileBlobStoreTests.digest(bytes) != digest {
                    problems.append("after \(when): \(stored) bytes under \(digest) that do not hash to it")
                }
            } catch {
                // A read racing a purge or a replacement may fail; it must never succeed with wrong bytes.
            }
        }

        // The user's requests mostly reach one process (a connection kept alive), now and then the other.
        var current = 0
        for step in 0..<(10 + Int.random(in: 0..<16, using: &random)) {
            if Int.random(in: 0..<4, using: &random) == 0 { current = 1 - current }
            var process = stores[current]
            let offset = (try? await process.offset(of: upload)) ?? nil
            let at = offset ?? 0
            // Most appends send the true bytes; one held open sends other bytes (a hostile user's, or a stale retry's).
            let source = Int.random(in: 0..<10, using: &random) > 0 ? truth : other
            let end = min(size, Int(at) + Self.partBytes)
            let action: String
            switch Int.random(in: 0..<100, using: &random) {
            case ..<30:
                action = "append \(at)..<\(end) of \(source == truth ? "true" : "other") bytes"
                _ = try? await process.append(FileBlobStoreTests.chunks(Array(source[Int(at)..<end])), to: upload, at: at, creating: at == 0)
            case ..<50:
                // Opened at the offset on the other process (its check passes) and held: its bytes land at a later step.
                action = "append held open at \(at)"
                process = stores[1 - current]
                let (chunks, feed) = AsyncStream<ByteBuffer>.makeStream()
                let (asked, signal) = AsyncStream<Void>.makeStream()
                let task = Task {
                    // Refused before it reads (busy, another offset): it says so by ending `asked`.
                    defer { signal.finish() }
                    return try await process.append(
                        AttachmentIntegrityTests.HeldChunks(asked: signal, chunks: chunks),
                        to: upload,
                        at: at,
                        creating: at == 0
                    )
                }
                var iterator = asked.makeAsyncIterator()
                _ = await iterator.next()
                held.append((feed, ByteBuffer(bytes: Array(other[Int(at)..<end])), task))
            case ..<65 where !held.isEmpty:
                action = "a held append's bytes land"
                let (feed, bytes, task) = held.removeFirst()
                feed.yield(bytes)
                feed.finish()
                _ = try? await task.value
            case ..<90:
                action = "complete"
                _ = try? await process.complete(upload, as: digest)
            case ..<93:
                action = "discard"
                _ = try? await process.discard(upload)
            case ..<98:
                action = "purge"
                let wanted = Bool.random(using: &random)
                _ = try? await process.purge(digest, unless: { wanted })
            default:
                action = "quarantine"
                _ = try? await process.quarantine(digest)
            }
            await check("step \(step) (\(action))")
        }
        for (feed, bytes, task) in held {
            feed.yield(bytes)
            feed.finish()
            _ = try? await task.value
        }
        await check("the held appends landed")
        // A true upload from nothing always ends with the true bytes named.
        let fresh = UploadID()
        _ = try await stores[0].append(FileBlobStoreTests.chunks(truth), to: fresh, at: 0, creating: true)
        _ = try await stores[1].complete(fresh, as: digest)
        await check("a true upload")
        if try await stores[0].size(of: digest) == nil { problems.append("a true upload completed, and nothing is named by its digest") }
        return problems
    }
}
