import FerryProtocol
import Foundation
import GRDB

/// What a store's queue holds and why it is not leaving, read in one transaction from the
/// store itself, so it answers for any process: an app, its extension, or `ferry client inspect`
/// on a store a user sent in.
public struct QueueSnapshot: Sendable, Equatable {
    /// Who syncs the store at the moment of the snapshot (`SyncConfiguration.leaseDuration`).
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

    /// When the snapshot was read.
    public var takenAt: Date
    /// Changes the server has not acknowledged yet (queued or in flight), by entity.
    public var queuedByEntity: [String: Int]
    /// Of those, changes on the wire or waiting for their answer.
    public var inFlight: Int
    /// When the oldest queued change was made; `nil` if nothing is queued, or the oldest was
    /// queued by a version of Ferry that did not record the time.
    public var oldestQueuedAt: Date?
    /// The current holder of the store's sync lease; `nil` when nobody syncs it.
    public var lease: Lease?
    /// Changes set aside, oldest first, each with why.
    public var deadLetters: [DeadLetter]
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
    /// (`SyncSession.queueSnapshot()`); `nil` when read from the store alone.
    public var scheduler: SchedulerState?
    /// What the client is doing now, for a snapshot taken through a session or a client: a
    /// wait for Retry-After or a backoff shows here with its reason; `nil` from the store alone.
    public var status: SyncStatus?

    /// Changes queued, in flight included.
    public var queued: Int { queuedByEntity.values.reduce(0, +) }

    /// The snapshot of `store` now.
    public static func read(from store: FerryStore) async throws -> QueueSnapshot {
        try await store.database.read { db in try read(db) }
    }

    static func read(_ db: Database) throws -> QueueSnapshot {
        var byEntity: [String: Int] = [:]
        for row in try Row.fetchAll(
            db,
            sql: "SELECT entity, COUNT(*) FROM ferry_outbox WHERE \(OutboxState.queuedCondition) GROUP BY entity"
        ) {
            byEntity[row[0]] = row[1]
        }
        let inFlight =
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_outbox WHERE state = ?", arguments: [OutboxState.inFlight.rawValue]) ?? 0
        // The entry with the lowest id is the oldest change; its time, if it has one.
        let oldest = try Double.fetchOne(
            db,
            sql: "SELECT queued_at FROM ferry_outbox WHERE \(OutboxState.queuedCondition) ORDER BY id LIMIT 1"
        )
        let lease = try Row.fetchOne(db, sql: "SELECT holder, pid, expires_at FROM ferry_lease WHERE id = 1").map { row in
            Lease(
                holder: row[0],
                processID: row[1],
                expiresAt: Date(timeIntervalSince1970: row[2]),
                holderIsRunning: SyncLease.processExists(row[1])
            )
        }
        let deadLetters = try Row.fetchAll(
            db,
            sql: "SELECT id, entity, entity_id, op, error FROM ferry_outbox WHERE state = ? ORDER BY id",
            arguments: [OutboxState.deadLettered.rawValue]
        )
        .map { DeadLetter(id: $0[0], entity: $0[1], entityID: $0[2], op: MutationOp(rawValue: $0[3]) ?? .upsert, reason: $0[4] ?? "") }
        let lastSynced = try Double.fetchOne(db, sql: "SELECT last_synced_at FROM ferry_meta")
        let journal = try Journal.latest(kinds: ["run.started", "run.finished", "wait"], db: db)
        let lastStart = journal.last { $0.kind == "run.started" }
        let lastRun = journal.last { $0.kind == "run.finished" }
        return QueueSnapshot(
            takenAt: Date(),
            queuedByEntity: byEntity,
            inFlight: inFlight,
            oldestQueuedAt: oldest.map(Date.init(timeIntervalSince1970:)),
            lease: lease,
            deadLetters: deadLetters,
            lastSyncedAt: lastSynced.map(Date.init(timeIntervalSince1970:)),
            lastRun: lastRun,
            lastWait: journal.last { event in event.kind == "wait" && (lastStart.map { event.at >= $0.at } ?? true) },
            unfinishedRunStartedAt: lastStart.flatMap { start in lastRun.map { $0.at < start.at } ?? true ? start.at : nil }
        )
    }

    /// The snapshot in words, a line each: what is queued and since when, who is sending it,
    /// what was set aside and why, how the last run ended. The answer to "why is it stuck?".
    public var explanation: [String] {
        var lines: [String] = []
        if queued == 0 {
            lines.append("Nothing is waiting to be sent.")
        } else {
            let entities = queuedByEntity.sorted { $0.key < $1.key }.map { "\($0.value.formatted()) \($0.key)" }.joined(separator: ", ")
            let age = oldestQueuedAt.map { "; the oldest was made \(Self.age(from: $0, to: takenAt)) ago" } ?? ""
            lines.append("Waiting to be sent: \(Self.changes(queued)) (\(entities))\(age).")
        }
        switch (inFlight, lease) {
        case (_, let lease?) where lease.holderIsRunning && lease.expiresAt > takenAt:
            let wire = inFlight > 0 ? ", \(Self.changes(inFlight)) of them on the wire" : ""
            lines.append("Being synced now by \(lease.holder) (its lease runs to \(Self.time(lease.expiresAt)))\(wire).")
        case (let count, let lease?) where count > 0:
            let why = lease.holderIsRunning ? "whose lease ran out at \(Self.time(lease.expiresAt))" : "whose process is gone"
            lines.append(
                "In flight from \(lease.holder), \(why): \(Self.changes(count)). The next sync returns them to the queue and sends them again; the server applies each once."
            )
        case (let count, nil) where count > 0:
            lines.append("In flight with nobody syncing: \(Self.changes(count)). The next sync returns them to the queue.")
        default:
            if queued > 0 {
                lines.append("Nobody is syncing this store now: the next trigger (a write, the app becoming active, a manual sync) sends them.")
            }
        }
        if !deadLetters.isEmpty {
            var reasons: [String: Int] = [:]
            for letter in deadLetters { reasons[letter.reason, default: 0] += 1 }
            let listed = reasons.sorted { $0.value > $1.value }.prefix(3).map { "\($0.value.formatted()) × \($0.key)" }
            let more = reasons.count > 3 ? "; and \(reasons.count - 3) other reasons" : ""
            lines.append("Set aside for the app to retry or discard: \(Self.changes(deadLetters.count)): \(listed.joined(separator: "; "))\(more).")
        }
        switch lastRun {
        case let run? where run.message == Self.runSucceeded: lines.append("The last sync succeeded at \(Self.time(run.at)).")
        case let run?: lines.append("The last sync ended at \(Self.time(run.at)): \(run.message).")
        case nil where lastSyncedAt == nil: lines.append("This store has never synced.")
        case nil: break
        }
        if let scheduler { lines.append(scheduler.explanation) }
        if let status, case .waiting = status.phase { lines.append("Now: \(status.progressText).") }
        if let unfinishedRunStartedAt {
            lines.append("A sync started at \(Self.time(unfinishedRunStartedAt)) has not finished: it is running, or its process ended first.")
        }
        if let lastWait {
            let seconds = lastWait.details["seconds"].flatMap(Double.init).map { " \(Int($0.rounded(.up))) s" } ?? ""
            lines.append("Its last run waited\(seconds) at \(Self.time(lastWait.at)): \(lastWait.message).")
        }
        if let lastSyncedAt, lastRun?.message != Self.runSucceeded {
            lines.append("The last successful sync ended at \(Self.time(lastSyncedAt)).")
        }
        return lines
    }

    /// The journal's message for a run that succeeded (`FerryClient`).
    static let runSucceeded = "sync finished"

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
