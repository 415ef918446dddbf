import FerryProtocol
import Foundation
import GRDB

/// Tuning of a client; the defaults suit the reference server.
public struct SyncConfiguration: Sendable {
    /// Mutations per push (halved automatically on 413), 1 to 1,000: the protocol's most by default. Whatever a
    /// push's size, the server syncs its commit to disk once, and that sync is most of the
    /// cost of a small push, so full batches drain a queue nearly twice as fast as half ones.
    public var batchSize = ProtocolLimits.maxMutationsPerPush
    /// Changes per pull page: 1,000 by default, the most every server takes, for the same reason.
    /// Up to 10,000 for a server that lists `large_pages` in its health features (a page is
    /// bounded by bytes as well); a server without it refuses a larger one, so every pull would fail.
    public var pullPageSize = ProtocolLimits.pullLimitEveryServerTakes
    /// Backoff for transient failures (resets, timeouts, 5xx).
    public var retry = RetryPolicy()
    /// Decides the conflicts of tables that detect them; the server wins by default.
    public var conflictPolicy = ConflictPolicy.serverWins
    /// How long this client's hold on the store's sync lasts unless renewed (every third of
    /// it, and with every batch and page). Another process that wants to sync the store waits
    /// this long at most after this one stops without releasing it; a holder whose process has
    /// ended (a crash on this device) is passed over at once. A second at least.
    public var leaseDuration: Duration = .seconds(60)
    /// How often a sync that finds another process syncing the store checks again.
    public var leaseRetryInterval: Duration = .milliseconds(250)
    /// Journal events kept in the store; older ones are dropped first.
    public var journalCapacity = 10_000
    /// The most bytes of downloaded attachments the store keeps; past it, the least recently used
    /// go (an attachment waiting for upload never does). 1 GiB by default.
    public var attachmentCacheBytes: Int64 = 1 << 30
    /// The bytes of one attachment request's body or answer: memory holds about this much per
    /// transfer, and a cut connection costs at most this much again. 8 MiB by default: over S3's
    /// smallest part (5 MiB), so a server on an object store has the store join the chunks
    /// without reading them back.
    public var attachmentChunkBytes = 8 << 20
    /// Who the app is, said with every request so a server can ask an app too old to sync to
    /// update (``SyncStatus/updateRequired``): the bundle's version and this platform by default.
    public var app = AppIdentity()

    /// The default tuning.
    public init() {}
}

/// What one sync run did.
public struct SyncReport: Sendable, Equatable {
    /// What the upload did.
    public var upload = UploadSummary()
    /// What the pull did.
    public var pull = PullSummary()
    /// 429 answers met during the run.
    public var rateLimited = 0
    /// HTTP requests made, retries included.
    public var requests = 0

    /// An empty report.
    public init() {}
}

/// An entry the server rejected; it waits here until the app retries or discards it.
public struct DeadLetter: Sendable, Equatable {
    /// The outbox entry's id.
    public var id: Int64
    /// The protocol's entity name of the record.
    public var entity: String
    /// The record's id.
    public var entityID: String
    /// Whether the change was an upsert or a delete.
    public var op: MutationOp
    /// Why it was set aside: the server's message, or what kept it from being sent.
    public var reason: String

    /// A dead letter as ``FerryClient/deadLetters()`` returns it: for an app's previews and tests.
    public init(id: Int64, entity: String, entityID: String, op: MutationOp, reason: String) {
        self.id = id
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.reason = reason
    }
}

/// One user's sync engine: a store, a server, and the status observers follow.
public actor FerryClient {
    /// The store this client syncs.
    public nonisolated let store: FerryStore
    /// The store's journal of this client's runs, requests and waits.
    public nonisolated let journal: Journal
    private let statusCenter = StatusCenter()
    private let connection: SyncConnection
    let configuration: SyncConfiguration
    private let clock: any Clock<Duration>
    private let lease: SyncLease
    private let schedulerConfiguration: SchedulerConfiguration
    /// Starts every run of this client and keeps its callers; made at first use (its runner
    /// calls back into this client).
    private var runs: SyncScheduler?
    /// Set by `stop()`.
    private(set) var stopped = false
    /// Whether the store's memberships all have their incarnations (``learnIncarnations()``):
    /// asked once per client, not at every run.
    var incarnationsKnown = false
    /// The attachment downloads under way, shared by every ask.
    let downloads = SharedDownloads()

    /// A client that syncs `store` with the server.
    ///
    /// - Parameters:
    ///   - store: the user's store.
    ///   - transport: how requests reach the server.
    ///   - token: the user's token; asked when the client has none, 30 s before its `exp`, and once after a 401 (see ``TokenProvider``).
    ///   - clock: the clock that backoff, rate-limit and lease waits sleep on (the lease's renewal keeps real time).
    ///   - configuration: batch and page sizes, retries, the conflict policy, the lease and the journal's capacity.
    public init(
        store: FerryStore,
        transport: any SyncTransport,
        token: @escaping TokenProvider,
        clock: any Clock<Duration> = ContinuousClock(),
        configuration: SyncConfiguration = SyncConfiguration()
    ) {
        self.init(store: store, transport: transport, token: token, clock: clock, configuration: configuration, jitterSeed: nil)
    }

    /// With `jitterSeed`, retry delays repeat from run to run: what seeded fault schedules replay.
    package init(
        store: FerryStore,
        transport: any SyncTransport,
        token: @escaping TokenProvider,
        clock: any Clock<Duration> = ContinuousClock(),
        configuration: SyncConfiguration = SyncConfiguration(),
        scheduler: SchedulerConfiguration = SchedulerConfiguration(),
        jitterSeed: UInt64?
    ) {
        var configuration = configuration
        // Sizes the protocol takes (0 would upload nothing yet report success; a page size out
        // of range would fail every pull with a 400), and a lease renewed at most every 1/3 s.
        configuration.batchSize = min(max(configuration.batchSize, 1), ProtocolLimits.maxMutationsPerPush)
        configuration.pullPageSize = min(max(configuration.pullPageSize, 1), ProtocolLimits.pullLimitRange.upperBound)
        configuration.leaseDuration = max(configuration.leaseDuration, .seconds(1))
        self.store = store
        self.journal = Journal(store: store, capacity: configuration.journalCapacity)
        self.configuration = configuration
        self.clock = clock
        self.schedulerConfiguration = scheduler
        self.lease = SyncLease(store: store, duration: configuration.leaseDuration.seconds)
        self.connection = SyncConnection(
            transport: transport,
            tokens: TokenCache(provider: token),
            clock: clock,
            retry: configuration.retry,
            journal: journal,
            status: statusCenter,
            random: jitterSeed.map { JitterGenerator(seed: $0) } ?? JitterGenerator(),
            app: configuration.app,
            clientID: { [identity = store.identity] in identity.clientID }
        )
    }

    /// The current status. Its counts include every change this process has committed to the
    /// store, up to the write that returned just before this read; changes another process
    /// (an app extension) wrote are counted at the next run.
    public var status: SyncStatus {
        get async {
            guard !stopped, await !statusCenter.countsAreExact(at: store.commits.count) else { return await statusCenter.status }
            if let counted = await refreshCounts() { return counted }
            return await statusCenter.status
        }
    }

    /// Every status change, starting with the current one.
    public func statusUpdates() async -> AsyncStream<SyncStatus> {
        await refreshCounts()
        return await statusCenter.stream()
    }

    /// Every change of the user's memberships from now on, once the pull page that learned it
    /// has committed: a space joined (its rows arrive with the same pull), a role changed, a
    /// space left (its rows are gone from the store). Ends when the client stops.
    public nonisolated func membershipChanges() -> AsyncStream<MembershipChange> {
        statusCenter.membershipChanges()
    }

    /// Every change the server refuses from now on, once its answer is applied: the change is a
    /// dead letter and the row shows the server's record again. For a banner or a form's error
    /// (``Rejection/isByAppRule``: the app's own rule on the server said no). Ends when the
    /// client stops.
    public nonisolated func rejections() -> AsyncStream<Rejection> {
        statusCenter.rejections()
    }

    /// Stops the client for good (its user signed out, its store is about to close): every
    /// status stream ends, and a later `sync()` throws ``FerryError/stopped(_:)`` instead of
    /// touching the closed store.
    func stop() async {
        stopped = true
        await scheduler.stop()  // the run in progress is cancelled, its callers told; none starts after
        await downloads.cancelAll()
        await connection.stop()
        await statusCenter.update { $0 = SyncStatus(phase: .signedOut) }
        await statusCenter.finishAll()
    }

    /// Uploads everything pending, then pulls until caught up; `full` pulls from the
    /// beginning instead of the saved cursor. A call while a run is in progress joins that run
    /// instead of starting another (a full call waits for an incremental run, then starts a
    /// full one). Cancelling the call that started a run cancels the run: its batch goes back
    /// to the queue, nothing stays in flight; cancelling a call that joined one ends only its
    /// own wait. The client's scheduler starts the run, the same one a ``SyncSession`` triggers,
    /// so the session's scheduler shows it and a background task's end stops it. Throws
    /// ``FerryError/stopped(_:)`` once the client's user has signed out, and
    /// ``FerryError/unreachable(_:underlying:)`` at once while the session's monitor says offline.
    @discardableResult
    public func sync(full: Bool = false) async throws -> SyncReport {
        guard !stopped else { throw Self.stoppedError }
        return try await scheduler.sync(full ? .full : .incremental)
    }

    /// The only record of this client's runs and of who waits for them: `sync()` and, in a
    /// session, every trigger go through it, so one run at a time serves them all.
    var scheduler: SyncScheduler {
        if let runs { return runs }
        let made = clock.scheduler(configuration: schedulerConfiguration, stoppedError: Self.stoppedError) { [weak self] kind in
            guard let self else { throw Self.stoppedError }
            return try await self.performSync(full: kind == .full)
        }
        runs = made
        return made
    }

    static let stoppedError = FerryError.stopped(
        "this client's user signed out and its store is closed; `SyncSession.client` is the signed-in user's"
    )

    /// The upload step of `sync()` on its own, without the pull (`ferry bench` measures it).
    /// Apps call `sync()`; this must not run beside it.
    package func push() async throws -> UploadSummary {
        try await holdingLease { try await self.upload() }
    }

    /// The changes first, holding back only those that wait for an attachment; then each
    /// attachment, and the changes they held back after every few MiB of them (not behind all
    /// the other uploads).
    private func upload() async throws -> UploadSummary {
        let uploader = Uploader(
            outbox: Outbox(store: store, lease: lease),
            connection: connection,
            journal: journal,
            status: statusCenter,
            conflictPolicy: configuration.conflictPolicy,
            maximumBatchSize: configuration.batchSize
        )
        var summary = try await uploader.drain()
        var released = UploadSummary()
        summary.attachmentsUploaded = try await attachmentUploader.uploadWaiting { released.add(try await uploader.drain()) }
        summary.add(released)
        return summary
    }

    private var attachmentUploader: AttachmentUploader {
        AttachmentUploader(
            store: store,
            connection: connection,
            journal: journal,
            status: statusCenter,
            chunkBytes: configuration.attachmentChunkBytes
        )
    }

    var attachmentDownloader: AttachmentDownloader {
        AttachmentDownloader(
            store: store,
            connection: connection,
            journal: journal,
            status: statusCenter,
            chunkBytes: configuration.attachmentChunkBytes,
            shared: downloads
        )
    }

    /// Runs `body` holding the store's sync lease: waits while another client (another process
    /// on the same store) holds it, renews it while `body` runs, and gives it up after.
    private func holdingLease<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        var waitingFor: String?
        let waiting = SyncStatus.Phase.waiting(seconds: configuration.leaseRetryInterval.seconds, reason: "another process is syncing this store")
        while let holder = try await lease.acquire() {
            if waitingFor != holder {
                waitingFor = holder
                await journal.record(
                    JournalEvent(kind: .leaseWait, message: "another client is syncing this store (\(holder)); waiting for it to finish")
                )
                await statusCenter.update { $0.phase = waiting }
            }
            try await clock.sleep(for: configuration.leaseRetryInterval)
        }
        let lease = self.lease
        let renewal = configuration.leaseDuration / 3
        // Wall time shared with other processes, not a wait of the sync: the real clock.
        let heartbeat = Task {
            while !Task.isCancelled {
                try await Task.sleep(for: renewal)
                try await lease.store.database.write { db in try lease.confirm(db) }
            }
        }
        defer { heartbeat.cancel() }
        // Given up even when cancelled (a sign-out), so the next client need not wait for the
        // expiry; a release that fails leaves the lease to expire and fails nothing.
        let outcome: Result<T, any Error>
        do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
        await Task { try? await lease.release() }.value
        return try outcome.get()
    }

    private func performSync(full: Bool) async throws -> SyncReport {
        // Said once, by the answer that required it: a run after it takes no lease, sends nothing
        // and writes no journal line.
        if let refusal = await connection.updateRequired { throw FerryError.updateRequired(refusal) }
        do {
            let report = try await holdingLease { try await self.leasedSync(full: full) }
            // The records are in the store: eager tables' attachments follow, outside the lease
            // (another process may sync meanwhile), and failing none of the run.
            _ = await attachmentDownloader.fetchEager()
            _ = try? await store.sweepAttachments(budget: configuration.attachmentCacheBytes)
            return report
        } catch let error where error is CancellationError || Task.isCancelled {
            // Stopped (a sign-out), not failed: what was in flight is back in the queue. An
            // unstructured task writes the line: the cancelled one's writes would not run.
            let journal = self.journal
            await Task {
                await journal.record(
                    JournalEvent(
                        kind: .runFinished,
                        message: "sync cancelled; its batch is back in the queue",
                        details: [.outcome: "cancelled"]
                    )
                )
            }
            .value
            await statusCenter.update { $0.phase = .idle }
            throw error
        }
    }

    private func leasedSync(full: Bool) async throws -> SyncReport {
        if full {
            try await store.database.write { db in try StoreMeta.setCursor(nil, db: db) }
        }
        await journal.record(JournalEvent(kind: .runStarted, message: "sync started"))
        let requestsBefore = await connection.requestCount
        let limitedBefore = await connection.rateLimitedCount
        var report = SyncReport()
        do {
            // Best effort, once: a server that cannot say leaves the run to go on as before.
            if !incarnationsKnown { try? await learnIncarnations() }
            report.upload = try await upload()
            report.pull = try await Puller(
                store: store,
                lease: lease,
                connection: connection,
                status: statusCenter,
                pageSize: configuration.pullPageSize,
                fromScratch: full
            )
            .pullUntilCaughtUp()
        } catch let error where error is CancellationError || Task.isCancelled {
            throw error  // performSync says so
        } catch let error as FerryError where error.code == .updateRequired {
            throw error  // said once, by the answer that required it
        } catch {
            let failure = FerryError(wrapping: error)
            await journal.record(JournalEvent(kind: .runFinished, message: "sync failed: \(failure)", details: [.outcome: "failed"]))
            await statusCenter.update {
                $0.phase = .failed(failure)
                $0.lastError = failure
            }
            await refreshCounts()
            throw error
        }
        report.requests = await connection.requestCount - requestsBefore
        report.rateLimited = await connection.rateLimitedCount - limitedBefore
        let now = Date()
        try await store.database.write { db in
            try StoreMeta.setLastSynced(now, db: db)
        }
        await journal.record(
            JournalEvent(
                kind: .runFinished,
                message: "sync finished",
                details: [
                    .outcome: "succeeded", .pushed: "\(report.upload.acknowledged)", .merged: "\(report.upload.merged)",
                    .conflicts: "\(report.upload.conflicts)",
                    .pulled: "\(report.pull.received)",
                    .requests: "\(report.requests)",
                ]
            )
        )
        await statusCenter.update {
            $0.phase = .idle
            $0.lastSyncedAt = now
            $0.lastError = nil
        }
        await refreshCounts()
        return report
    }

    /// Reads the pending and dead-letter counts from the outbox into the status, and returns
    /// the status they went into (`nil` if the outbox could not be read).
    @discardableResult
    func refreshCounts() async -> SyncStatus? {
        let commits = store.commits.count  // read first: a commit during the count is counted again next time
        guard let counts = try? await Outbox.counts(in: store), let spaces = try? await store.database.read(SpaceMemberships.read),
            let attachments = try? await store.database.read(AttachmentTable.waitingCount)
        else {
            return nil
        }
        return await statusCenter.updateCounts(asOfCommit: commits) {
            $0.spaces = spaces
            $0.pending = counts.pending
            $0.deadLettered = counts.deadLettered
            // What waits to upload, idle and offline too (a run's uploader counts them as it goes).
            if case .uploading = $0.phase {
            } else {
                $0.attachments.uploadsWaiting = attachments.count
                $0.attachments.uploadBytes = attachments.bytes
            }
            if let lastSynced = counts.lastSyncedAt { $0.lastSyncedAt = lastSynced }
        }
    }

    /// Opens the server's event stream once, with this client's token and id (`LiveUpdates`).
    func openEventStream() async throws -> TransportStream {
        try await connection.openEventStream()
    }

    /// Sends a request of the client's own (space management) through its connection: paced,
    /// authenticated, retried like a sync's. A 4xx answer throws ``FerryError/refused(code:message:)``.
    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let response = try await connection.send(request)
        guard (200..<300).contains(response.status) else {
            let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: response.body)
            throw FerryError.refused(
                code: envelope?.error.code ?? "http_\(response.status)",
                message: envelope?.error.message ?? SyncConnection.message(in: response)
            )
        }
        return response
    }

    // MARK: - Dead letters

    /// What the queue holds and why it is not leaving (``QueueSnapshot/explanation`` in words),
    /// with this client's status.
    public func queueSnapshot() async throws -> QueueSnapshot {
        var snapshot = try await QueueSnapshot.read(from: store)
        snapshot.status = await status
        return snapshot
    }

    /// Every dead-lettered outbox entry, oldest first. Throws the database's error if the store cannot be read.
    public func deadLetters() async throws -> [DeadLetter] {
        try await store.database.read(OutboxTable.deadLetters)
    }

    /// Queues dead-lettered changes again, as new entries at the end of the queue (new ids:
    /// the server has spent the old ones). A dead letter that a later change of its record
    /// supersedes is dropped instead: one queued or in flight here, and one already answered
    /// (a dead letter goes away by itself then). Sent after that change, it would put older
    /// data over newer. Returns how many were queued again.
    ///
    /// A local change like the app's own writes, in one transaction: safe while this client or
    /// another process on the store syncs, so it takes no sync lease. A run in progress sends
    /// the queued changes if its queue reaches them, else the next run does.
    ///
    /// Each retried change is also made to its row again (uncaptured), as the app's own write
    /// was: the row may show the server's state meanwhile (a refusal restores it, a re-granted
    /// space comes back whole), and once the server takes the change the store holds it.
    @discardableResult
    public func retryDeadLetters() async throws -> Int {
        let queued = try await store.database.write { [store] db in
            var writer = RecordWriter(store: store)
            return try FerryStore.withoutCapture(db) {
                try OutboxTable.requeueDeadLetters(db) { dead in
                    let data: JSONObject? =
                        dead.op == .delete ? nil : (try? JSONDecoder().decode(JSONObject.self, from: Data((dead.data ?? "{}").utf8))) ?? [:]
                    // A row the schema refuses now (another space's row holds its id) keeps what it shows.
                    try? writer.write(
                        entity: dead.record.entity,
                        entityID: dead.record.entityID,
                        data: data,
                        naturalKey: dead.naturalKey,
                        placement: SpacePlacement(server: dead.space),
                        db: db
                    )
                }
            }
        }
        await journal.record(
            JournalEvent(kind: .deadLettersRetried, message: "\(queued) dead-lettered changes queued again", details: [.count: "\(queued)"])
        )
        await refreshCounts()
        return queued
    }

    /// Deletes every dead-lettered entry: its change is never sent, and the local rows are not rolled back, so they may
    /// differ from the server's until they change again.
    /// A local change in one transaction, like ``retryDeadLetters()``: safe beside a sync. Returns how many were discarded.
    @discardableResult
    public func discardDeadLetters() async throws -> Int {
        let discarded = try await store.database.write { db in
            try OutboxTable.discardDeadLetters(db)
        }
        await journal.record(
            JournalEvent(kind: .deadLettersDiscarded, message: "\(discarded) dead-lettered changes discarded", details: [.count: "\(discarded)"])
        )
        await refreshCounts()
        return discarded
    }
}
