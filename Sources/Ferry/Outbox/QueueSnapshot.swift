import FerryProtocol
import Foundation
import GRDB

/// What a store's queue holds and why it is not leaving, read in one transaction from the
/// store itself, so it answers for any process: an app, its extension, or `ferry client inspect`
/// on a store a user sent in.
public struct QueueSnapshot: Sendable, Equatable {
    /// Who syncs the store at the moment of the snapshot (``SyncConfiguration/leaseDuration``).
    public struct Lease: Sendable, Equatable {
        /// The holding client: its process id and a random suffix.
        public var holder: String
        /// The holder's process id.
        public var processID: Int32
        /// When the lease ends unless the holder renews it.
        public var expiresAt: Date
        /// Whether the holder's process still runs on this machine; a lease of a process that
        /// is gone is passed over by the next sync.
        public var holderIsRunning: Bool
    }

    /// A record pulled from the server that the app's schema refused (a UNIQUE index, a NOT
    /// NULL column, a foreign key): kept beside the app's tables and tried again after every pull.
    public struct SetAsideRecord: Sendable, Equatable {
        /// The protocol's entity name of the record.
        public var entity: String
        /// The record's id.
        public var entityID: String
        /// The server's version that was refused.
        public var version: Int64
        /// What the app's schema said.
        public var reason: String
    }

    /// An attachment the store holds or must upload (PROTOCOL.md, "Attachments").
    public struct Attachment: Sendable, Equatable {
        /// Its digest, as rows hold it.
        public var digest: String
        /// Its bytes.
        public var size: Int64
        /// Whether it waits for upload: the changes referencing it wait for it.
        public var waitsForUpload: Bool
        /// Whether its file is in the store's folder (a downloaded one may have been evicted).
        public var stored: Bool
        /// Failed uploads since the last success.
        public var attempts: Int
        /// Why the last upload failed; `nil` when none has since the last success.
        public var lastError: String?
    }

    /// When the snapshot was read.
    public var takenAt: Date
    /// Changes the server has not acknowledged yet (queued or in flight), by entity.
    public var queuedByEntity: [String: Int]
    /// Of those, changes taken by a sync that has not applied their answer yet, by entity.
    public var inFlightByEntity: [String: Int]
    /// When the oldest of those was taken; `nil` if none is in flight, or none has a time.
    public var inFlightSince: Date?
    /// When the oldest queued change was made; `nil` if nothing is queued, or none has a time.
    public var oldestQueuedAt: Date?
    /// Queued changes without a time: queued by a version of Ferry that did not record it.
    public var untimedQueued: Int
    /// The current holder of the store's sync lease; `nil` when nobody syncs it.
    public var lease: Lease?
    /// Changes set aside, oldest first, each with why.
    public var deadLetters: [DeadLetter]
    /// Pulled records the app's schema refused, oldest first.
    public var setAside: [SetAsideRecord] = []
    /// The attachments the store holds or must upload, least recently used first.
    public var attachments: [Attachment] = []
    /// When the last successful sync ended; `nil` if none has.
    public var lastSyncedAt: Date?
    /// The journal's latest `run.finished` event: how the last run ended, and when.
    public var lastRun: JournalEvent?
    /// The journal's latest `wait` since the last run started: a rate limit, an unavailable
    /// server, a backoff; `nil` if the last run did not wait.
    public var lastWait: JournalEvent?
    /// When a run started that has not finished: it is running, or its process ended first.
    public var unfinishedRunStartedAt: Date?
    /// What the signed-in user's scheduler is doing, for a snapshot taken through a session
    /// (``SyncSession/queueSnapshot()``); `nil` when read from the store alone.
    public var scheduler: SchedulerState?
    /// What the client is doing now, for a snapshot taken through a session or a client: a
    /// wait for Retry-After or a backoff shows here with its reason; `nil` from the store alone.
    public var status: SyncStatus?

    /// Changes queued, in flight included.
    public var queued: Int { queuedByEntity.values.reduce(0, +) }

    /// Changes taken by a sync that has not applied their answer yet.
    public var inFlight: Int { inFlightByEntity.values.reduce(0, +) }

    /// The snapshot of `store` now.
    public static func read(from store: FerryStore) async throws -> QueueSnapshot {
        try await store.database.read { db in try read(db) }
    }

    /// The snapshot of the store file at `path`, read without changing a byte of it: no
    /// migration, no trigger, nothing created. For a store an app still has open, or one a
    /// user sent in, of any version of Ferry.
    ///
    /// - Throws: ``FerryError/unreadableStore(_:underlying:)`` for a file that is not a Ferry store.
    public static func read(atPath path: String) throws -> QueueSnapshot {
        try FerryStore.readFile(atPath: path, read)
    }

    static func read(_ db: Database) throws -> QueueSnapshot {
        // Stores of older versions lack what later ones added: the lease (ferry-v4).
        var byEntity: [String: Int] = [:]
        var inFlight: [String: Int] = [:]
        var oldest: Double?
        var untimed = 0
        var sentAt: Double?
        for queued in try OutboxTable.queuedByEntity(db) {
            byEntity[queued.entity] = queued.count
            if queued.inFlight > 0 { inFlight[queued.entity] = queued.inFlight }
            if let time = queued.oldestQueuedAt { oldest = min(oldest ?? time, time) }
            untimed += queued.untimed
            if let time = queued.firstSentAt { sentAt = min(sentAt ?? time, time) }
        }
        let lease = try SyncLease.held(db).map {
            Lease(holder: $0.holder, processID: $0.processID, expiresAt: $0.expiresAt, holderIsRunning: SyncLease.processExists($0.processID))
        }
        let deadLetters = try OutboxTable.deadLetters(db)
        let setAside = try PulledRecords.setAside(db).map {
            SetAsideRecord(entity: $0.entity, entityID: $0.entityID, version: $0.version, reason: $0.reason)
        }
        let attachments = try AttachmentTable.all(db).map {
            Attachment(
                digest: $0.digest.description,
                size: $0.size,
                waitsForUpload: $0.waitsForUpload,
                stored: $0.stored,
                attempts: $0.attempts,
                lastError: $0.error
            )
        }
        let lastSynced = try StoreMeta.lastSyncedAt(db)
        // The newest of each kind in the whole journal: a long offline spell fills it with
        // triggers, and the run that matters may be thousands of events back.
        let lastStart = try Journal.latest(kind: .runStarted, db: db)
        let lastRun = try Journal.latest(kind: .runFinished, db: db)
        let wait = try Journal.latest(kind: .wait, db: db)
        return QueueSnapshot(
            takenAt: Date(),
            queuedByEntity: byEntity,
            inFlightByEntity: inFlight,
            inFlightSince: sentAt.map(Date.init(timeIntervalSince1970:)),
            oldestQueuedAt: oldest.map(Date.init(timeIntervalSince1970:)),
            untimedQueued: untimed,
            lease: lease,
            deadLetters: deadLetters,
            setAside: setAside,
            attachments: attachments,
            lastSyncedAt: lastSynced,
            lastRun: lastRun,
            lastWait: wait.flatMap { wait in lastStart.map { wait.at >= $0.at } ?? true ? wait : nil },
            unfinishedRunStartedAt: lastStart.flatMap { start in lastRun.map { $0.at < start.at } ?? true ? start.at : nil }
        )
    }

    /// The snapshot in words, a line each: what is unacknowledged and since when, who is
    /// sending it, what was set aside and why, how the last run ended, what the scheduler and
    /// the client do now. The answer to "why is it stuck?".
    public var explanation: [String] {
        queueLines + setAsideLines + runLines
    }

    /// Whether the lease's holder runs and holds it still.
    private var running: Bool { lease.map { $0.holderIsRunning && $0.expiresAt > takenAt } ?? false }

    /// What waits to be sent, and who sends it.
    private var queueLines: [String] {
        var lines: [String] = []
        if queued == 0 {
            lines.append("Nothing is waiting to be sent.")
        } else {
            let flying =
                inFlight > 0
                ? ", \(inFlight.formatted()) of them in flight\(inFlightByEntity.count > 1 ? " (\(Self.list(inFlightByEntity)))" : "")" : ""
            var age =
                oldestQueuedAt.map { "; the oldest was made \(untimedQueued > 0 ? "at least " : "")\(Self.age(from: $0, to: takenAt)) ago" } ?? ""
            if untimedQueued > 0 && oldestQueuedAt == nil { age = "; queued by a version of Ferry that did not record when" }
            lines.append("Not yet acknowledged by the server: \(Self.changes(queued)) (\(Self.list(queuedByEntity)))\(flying)\(age).")
        }
        switch (inFlight, lease) {
        case (_, let lease?) where running:
            let since = inFlightSince.map { "; its changes in flight were sent \(Self.age(from: $0, to: takenAt)) ago" } ?? ""
            lines.append("Being synced by \(lease.holder), whose lease runs to \(Self.time(lease.expiresAt))\(since).")
        case (let count, let lease?) where count > 0:
            let why =
                lease.holderIsRunning
                ? "whose lease ran out at \(Self.time(lease.expiresAt))" : "and no process \(lease.processID) runs on this machine"
            lines.append(
                "Sent\(inFlightSince.map { " at \(Self.time($0))" } ?? "") by \(lease.holder), \(why): the next sync returns the \(Self.changes(count)) in flight to the queue and sends them again; the server applies each once."
            )
        case (let count, nil) where count > 0:
            lines.append("In flight with nobody syncing: the next sync returns the \(Self.changes(count)) to the queue.")
        default:
            if queued > 0 {
                lines.append("Nobody is syncing this store now: the next trigger (a write, the app becoming active, a manual sync) sends them.")
            }
        }
        return lines
    }

    /// What was set aside, refused or waits for its attachments.
    private var setAsideLines: [String] {
        var lines: [String] = []
        if !deadLetters.isEmpty {
            var byReason: [String: [DeadLetter]] = [:]
            for letter in deadLetters { byReason[letter.reason.isEmpty ? "no reason recorded" : letter.reason, default: []].append(letter) }
            let listed = byReason.sorted { ($0.value.count, $1.key) > ($1.value.count, $0.key) }.prefix(3).map { reason, letters in
                let named = letters.prefix(3).map { "\($0.entity)/\($0.entityID)" }.joined(separator: ", ")
                return "\(reason) (\(letters.count > 3 ? "\(named) and \(letters.count - 3) more" : named))"
            }
            let more = byReason.count > 3 ? "; and \(byReason.count - 3) other reasons" : ""
            lines.append("Set aside for the app to retry or discard: \(Self.changes(deadLetters.count)): \(listed.joined(separator: "; "))\(more).")
        }
        if !setAside.isEmpty {
            let named = setAside.prefix(3).map { "\($0.entity)/\($0.entityID): \($0.reason)" }.joined(separator: "; ")
            let more = setAside.count > 3 ? "; and \(setAside.count - 3) more" : ""
            lines.append(
                "Pulled but refused by the app's schema, tried again after every pull: \(setAside.count == 1 ? "1 record" : "\(setAside.count.formatted()) records"): \(named)\(more)."
            )
        }
        let waiting = attachments.filter(\.waitsForUpload)
        if !waiting.isEmpty {
            let bytes = ByteCountFormatter.string(fromByteCount: waiting.reduce(0) { $0 + $1.size }, countStyle: .file)
            let failed = waiting.first { $0.lastError != nil }.map { "; \($0.digest) failed \($0.attempts) times, last: \($0.lastError ?? "")" } ?? ""
            lines.append(
                "Attachments waiting to upload, their records waiting for them: \(waiting.count) (\(bytes))\(failed)."
            )
        }
        return lines
    }

    /// How the last run ended, and what runs or waits now.
    private var runLines: [String] {
        var lines: [String] = []
        switch lastRun {
        case let run? where run.runOutcome == "succeeded":
            let counts = [JournalDetail.pushed, .merged, .pulled].compactMap { key in run[key].map { "\(key) \($0)" } }
            let requests = run[.requests].map { ", in \($0 == "1" ? "1 request" : "\($0) requests")" } ?? ""
            lines.append("The last sync succeeded at \(Self.time(run.at))\(counts.isEmpty ? "" : ": \(counts.joined(separator: ", "))\(requests)").")
        case let run?: lines.append("The last sync ended at \(Self.time(run.at)): \(run.message).")
        case nil where lastSyncedAt == nil && unfinishedRunStartedAt == nil: lines.append("This store has never synced.")
        case nil: break
        }
        if let unfinishedRunStartedAt {
            let fate =
                running
                ? "is running"
                : lease.map { _ in "did not finish: its process ended, or lost the lease" } ?? "did not finish: its process ended first"
            lines.append("A sync started at \(Self.time(unfinishedRunStartedAt)) \(fate).")
        }
        if let lastWait {
            let seconds = lastWait[.seconds].flatMap(Double.init) ?? 0
            let until = lastWait.at.addingTimeInterval(seconds)
            if unfinishedRunStartedAt != nil, running, until > takenAt {
                lines.append("It is waiting until \(Self.time(until)) (\(Self.age(from: takenAt, to: until)) from now): \(lastWait.message).")
            } else {
                lines.append(
                    "Its last run was told to wait \(Self.age(from: lastWait.at, to: until)) at \(Self.time(lastWait.at)): \(lastWait.message)."
                )
            }
        }
        if let scheduler { lines.append(scheduler.explanation) }
        if let status, case .waiting = status.phase { lines.append("Now: \(status.progressText).") }
        if let lastSyncedAt, lastRun?.runOutcome != "succeeded" {
            lines.append("The last successful sync ended at \(Self.time(lastSyncedAt)).")
        }
        return lines
    }

    /// "40 events, 1 notes": counts by entity, in the entities' order.
    private static func list(_ byEntity: [String: Int]) -> String {
        byEntity.sorted { $0.key < $1.key }.map { "\($0.value.formatted()) \($0.key)" }.joined(separator: ", ")
    }

    private static func changes(_ count: Int) -> String {
        count == 1 ? "1 change" : "\(count.formatted()) changes"
    }

    private static func time(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: false))
    }

    /// "3 s", "12 min", "5 h", "2 days": how a person reads a wait.
    static func age(from start: Date, to end: Date) -> String {
        let seconds = max(0, end.timeIntervalSince(start))
        switch seconds {
        case ..<120: return "\(Int(seconds)) s"
        case ..<7200: return "\(Int(seconds / 60)) min"
        case ..<172_800: return "\(Int(seconds / 3600)) h"
        default: return "\(Int(seconds / 86400)) days"
        }
    }
}
