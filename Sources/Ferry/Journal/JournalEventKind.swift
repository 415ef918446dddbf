extension JournalEvent {
    /// What kind of thing happened: the name a journal line carries in `kind`. Readers (the
    /// timeline page, the demo, ``QueueSnapshot``) match on these and on `details`, never on a
    /// message's words. A kind this version does not know (written by a newer one) still reads.
    public struct Kind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        /// The name as the journal stores it: `run.finished`.
        public var rawValue: String

        /// The kind named `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// Reads the kind as the journal stores it: a plain string.
        public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }

        /// Writes the kind as a plain string, as the journal always has.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }

        /// The name, as the journal stores it.
        public var description: String { rawValue }

        /// An attachment's bytes reached the server: `.digest`, `.bytes`.
        public static let attachmentUploaded = Kind(rawValue: "attachment.uploaded")
        /// An attachment's bytes were downloaded into the store's folder: `.digest`, `.bytes`.
        public static let attachmentDownloaded = Kind(rawValue: "attachment.downloaded")
        /// An attachment could not be uploaded or downloaded (`.digest`); the message says why.
        public static let attachmentFailed = Kind(rawValue: "attachment.failed")
        /// A client's sync run began; `run.finished` ends it.
        public static let runStarted = Kind(rawValue: "run.started")
        /// A sync run ended: `.outcome` is `succeeded`, `failed` or `cancelled`.
        public static let runFinished = Kind(rawValue: "run.finished")
        /// One HTTP request and its answer: `method`, `path`, `status` (absent when it failed), `bytes`, `received`, `ms`, `attempt`.
        public static let request = Kind(rawValue: "request")
        /// A wait before the next request (rate limit, server unavailable, backoff).
        public static let wait = Kind(rawValue: "wait")
        /// What a progress bar showed: `done`, and `total` while uploading.
        public static let progress = Kind(rawValue: "progress")
        /// Changes set aside as dead letters.
        public static let deadLettered = Kind(rawValue: "deadLettered")
        /// Dead letters queued again: `count`.
        public static let deadLettersRetried = Kind(rawValue: "deadLetters.retried")
        /// Dead letters dropped: `count`.
        public static let deadLettersDiscarded = Kind(rawValue: "deadLetters.discarded")
        /// A batch the server refused whole was halved.
        public static let batchHalved = Kind(rawValue: "batch.halved")
        /// A token was asked for.
        public static let token = Kind(rawValue: "token")
        /// A background task's sync.
        public static let background = Kind(rawValue: "background")
        /// Another process holds the store's sync lease.
        public static let leaseWait = Kind(rawValue: "lease.wait")
        /// A pull started again from scratch (`.reason`: the server's refusal of the cursor, or `full`).
        public static let pullRestarted = Kind(rawValue: "pull.restarted")
        /// A pull from scratch ended, and the records it did not bring back left the store: `.removed`, `.kept` (changes queued).
        public static let pullSwept = Kind(rawValue: "pull.swept")
        /// The server revoked a space (`.space`): its rows left the store (`.removed`)
        /// and its queued changes became dead letters (`.deadLettered`).
        public static let spaceRevoked = Kind(rawValue: "space.revoked")
        /// The user gained a space (`.space`, `.role`); the pull brings it whole.
        public static let spaceJoined = Kind(rawValue: "space.joined")
        /// The server reported a conflict and the policy ended it: `.entity`,
        /// `.entityID`, `.resolution` (`server`, `local` or `merged`), `.serverVersion`.
        public static let conflict = Kind(rawValue: "conflict")
        /// The user's role in a space changed (`.space`, `.role`, `.from`).
        public static let spaceRoleChanged = Kind(rawValue: "space.roleChanged")
        /// A pulled record the app's schema refused was set aside.
        public static let pullSetAside = Kind(rawValue: "pull.setAside")
        /// The server required a newer version of the app (`426 update_required`); nothing more is sent.
        public static let updateRequired = Kind(rawValue: "updateRequired")
        /// The server answered a value this version does not know (a result's status, a
        /// change's op, a space's role): that one result was held, the rest of the answer used.
        public static let unrecognized = Kind(rawValue: "unrecognized")
        /// The store took a new client id: another store holds its old one.
        public static let clientRenewed = Kind(rawValue: "client.renewed")
        /// The server's event stream opened (`status`), failed, or ended (`LiveUpdates`).
        public static let liveStream = Kind(rawValue: "live.stream")
        /// A trigger reached the scheduler: `trigger`.
        public static let triggerReceived = Kind(rawValue: "trigger.received")
        /// What became of a trigger: `trigger`, `fate`.
        public static let trigger = Kind(rawValue: "trigger")
        /// A scheduler run began (`run`, `kind`) or ended (`run`, `outcome`).
        public static let schedulerRun = Kind(rawValue: "scheduler.run")
        /// Runs held while a background task's time ran out, or allowed again: `held`.
        public static let schedulerHeld = Kind(rawValue: "scheduler.held")
    }

    /// How a `run.finished` event's run ended: `succeeded`, `failed` or `cancelled`; `nil` for
    /// another kind. Events a version before `outcome` existed wrote are read from their words.
    public var runOutcome: String? {
        guard kind == .runFinished else { return nil }
        if let outcome = self[.outcome] { return outcome }
        if message == "sync finished" { return "succeeded" }
        return message.hasPrefix("sync failed") ? "failed" : "cancelled"
    }
}
