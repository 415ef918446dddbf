import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry client inspect`: the store's queue in words that answer "why is it stuck?".
struct ClientInspectQueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "What the store's queue holds and why it is not leaving: queued and in-flight changes, the sync lease, dead letters, the last run."
    )

    @OptionGroup var options: StoreOptions
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        // Looked at, never changed: no migration, no trigger, nothing created, so an app that
        // has the store open goes on as it was.
        let file = try options.existingStore()
        let snapshot: QueueSnapshot
        do {
            snapshot = try QueueSnapshot.read(atPath: file.path)
        } catch let error as FerryError {
            throw CommandFailure("\(error)")
        }
        if json {
            printNow(String(decoding: try ProtocolValidation.encode(Self.json(snapshot)), as: UTF8.self))
        } else {
            printNow((snapshot.explanation + Self.attachmentLines(snapshot.attachments)).joined(separator: "\n"))
        }
    }

    /// A line per attachment (the first 20): its digest, size and state.
    static func attachmentLines(_ attachments: [QueueSnapshot.Attachment]) -> [String] {
        guard !attachments.isEmpty else { return [] }
        var lines = ["Attachments (\(attachments.count)):"]
        for attachment in attachments.prefix(20) {
            let state =
                attachment.waitsForUpload
                ? "waiting for upload" + (attachment.lastError.map { ", \(attachment.attempts) failed, last: \($0)" } ?? "")
                : attachment.stored ? "on the server, file held" : "on the server, file evicted"
            lines.append("  \(attachment.digest) \(ByteCountFormatter.string(fromByteCount: attachment.size, countStyle: .file)): \(state)")
        }
        if attachments.count > 20 { lines.append("  and \(attachments.count - 20) more") }
        return lines
    }

    static func json(_ snapshot: QueueSnapshot) -> JSONObject {
        func time(_ date: Date?) -> JSONValue { date.map { .string($0.formatted(.iso8601)) } ?? .null }
        func event(_ event: JournalEvent?) -> JSONValue {
            event.map {
                .object([
                    "at": time($0.at), "kind": .string($0.kind.rawValue), "message": .string($0.message),
                    "details": .object($0.details.mapValues { .string($0) }),
                ])
            } ?? .null
        }
        return [
            "takenAt": time(snapshot.takenAt),
            "queued": .integer(Int64(snapshot.queued)),
            "untimedQueued": .integer(Int64(snapshot.untimedQueued)),
            "unfinishedRunStartedAt": time(snapshot.unfinishedRunStartedAt),
            "queuedByEntity": .object(snapshot.queuedByEntity.mapValues { .integer(Int64($0)) }),
            "inFlight": .integer(Int64(snapshot.inFlight)),
            "inFlightByEntity": .object(snapshot.inFlightByEntity.mapValues { .integer(Int64($0)) }),
            "inFlightSince": time(snapshot.inFlightSince),
            "oldestQueuedAt": time(snapshot.oldestQueuedAt),
            "lease": snapshot.lease.map {
                .object([
                    "holder": .string($0.holder), "processID": .integer(Int64($0.processID)), "expiresAt": time($0.expiresAt),
                    "holderIsRunning": .bool($0.holderIsRunning),
                ])
            } ?? .null,
            "deadLetters": .array(
                snapshot.deadLetters.map {
                    .object([
                        "id": .integer($0.id), "entity": .string($0.entity), "entityID": .string($0.entityID), "op": .string($0.op.rawValue),
                        "reason": .string($0.reason),
                    ])
                }
            ),
            "setAside": .array(
                snapshot.setAside.map {
                    .object([
                        "entity": .string($0.entity), "entityID": .string($0.entityID), "version": .integer($0.version),
                        "reason": .string($0.reason),
                    ])
                }
            ),
            "attachments": .array(
                snapshot.attachments.map {
                    .object([
                        "digest": .string($0.digest), "size": .integer($0.size), "waitsForUpload": .bool($0.waitsForUpload),
                        "stored": .bool($0.stored), "attempts": .integer(Int64($0.attempts)), "lastError": $0.lastError.map { .string($0) } ?? .null,
                    ])
                }
            ),
            "lastSyncedAt": time(snapshot.lastSyncedAt),
            "lastRun": event(snapshot.lastRun),
            "lastWait": event(snapshot.lastWait),
            "explanation": .array(snapshot.explanation.map { .string($0) }),
        ]
    }
}
