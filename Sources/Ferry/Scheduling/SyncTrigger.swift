/// Why a sync was asked for.
public enum SyncTrigger: String, Sendable, Hashable, CaseIterable {
    /// The app started: a catch-up from the saved cursor, as every trigger (a launch that
    /// pulled everything again cost a whole data set on every start).
    case launch
    /// The app came to the foreground.
    case becameActive
    /// The link came back (offline → online). Sent by the scheduler itself from connectivity reports.
    case connectivityRestored
    /// A synced table or the explicit enqueue API recorded a change.
    case localChange
    /// A silent push said the server has something new.
    case remoteNotification
    /// The periodic timer fired (``SchedulerConfiguration/periodicInterval``, only while active).
    case periodic
    /// A person asked (pull to refresh): no settle window.
    case manual
    /// The server's event stream said that something the user reads changed (another device's
    /// write, a member's write to a shared space, a membership), or it opened again after a
    /// gap (``SyncSession``'s live stream).
    case serverChange
    /// The system woke the app for background work (`BGAppRefreshTask`, `BGProcessingTask`):
    /// ``SyncSession/backgroundSync(timeLimit:)``.
    case backgroundTask

    /// What the trigger asks for unless told otherwise: incremental, for every trigger. A pull
    /// starts from scratch only when the store is new, the server refuses the cursor, or the
    /// app asks for it (``SyncSession/sync(full:)``).
    public var defaultKind: SyncKind { .incremental }

    /// The app is in front of its user: runs held after a background task start again.
    var isForeground: Bool { self == .launch || self == .becameActive || self == .manual }

    /// Whoever asks waits for the run, so it starts without a settle window.
    var settlesAtOnce: Bool { self == .manual || self == .backgroundTask }
}

/// How much a run does.
public enum SyncKind: String, Sendable, Hashable, Comparable {
    /// Push pending changes, pull from the saved cursor.
    case incremental
    /// Push pending changes, pull everything from the beginning.
    case full

    /// An incremental run is less than a full one: a request that coalesces both becomes full.
    public static func < (lhs: SyncKind, rhs: SyncKind) -> Bool { lhs == .incremental && rhs == .full }
}

/// What became of a trigger, as the journal records it; ``SyncScheduler/history`` keeps every
/// fate but `ignored` (connectivity reports that change nothing), which only the journal and
/// ``SyncScheduler/eventStream()`` show.
public enum TriggerFate: Sendable, Equatable, CustomStringConvertible {
    /// It was the first of the triggers that run `run` served.
    case startedRun(Int)
    /// It arrived in the settle window of a request that became run `run`.
    case coalescedIntoRun(Int)
    /// It arrived while run `run` was in progress; a follow-up run will serve it.
    case queuedAfterRun(Int)
    /// The device is offline; it waits for the link to return.
    case waitingForNetwork
    /// A report that asks for no run: a first connectivity report, a link still up or going
    /// down, an event stream opening while a run is pending anyway.
    case ignored(IgnoredReason)
}

/// Why a trigger asked for no run; the journal's `reason` detail is its case's name, and
/// `online` says what a connectivity report said.
public enum IgnoredReason: Sendable, Equatable, CustomStringConvertible {
    /// The first connectivity report, online or not: a baseline, not a change.
    case baseline(online: Bool)
    /// Online again while already online.
    case stillOnline
    /// The link went down: nothing can run; the triggers wait for it.
    case wentOffline
    /// The event stream opened while a run was pending: that run pulls after it.
    case streamOpenedWithRunPending

    /// The case's name, as the journal's `reason` detail: `wentOffline`.
    public var name: String {
        switch self {
        case .baseline: "baseline"
        case .stillOnline: "stillOnline"
        case .wentOffline: "wentOffline"
        case .streamOpenedWithRunPending: "streamOpenedWithRunPending"
        }
    }

    /// What a connectivity report said; `nil` for other reasons.
    public var online: Bool? {
        switch self {
        case .baseline(let online): online
        case .stillOnline: true
        case .wentOffline: false
        case .streamOpenedWithRunPending: nil
        }
    }

    /// In words, as the journal's message and its `why` detail give it.
    public var description: String {
        switch self {
        case .baseline(let online): "first report (\(online ? "online" : "offline")) is a baseline"
        case .stillOnline: "still online"
        case .wentOffline: "went offline"
        case .streamOpenedWithRunPending: "event stream opened; the pending run pulls after it"
        }
    }
}

extension TriggerFate {
    /// The case's name, as the journal's `fate` detail: `startedRun`, `ignored`, …
    var name: String {
        switch self {
        case .startedRun: "startedRun"
        case .coalescedIntoRun: "coalescedIntoRun"
        case .queuedAfterRun: "queuedAfterRun"
        case .waitingForNetwork: "waitingForNetwork"
        case .ignored: "ignored"
        }
    }

    /// The journal's details for the fate: its `fate` name, the `run` it names; for an ignored
    /// report, its `reason` (named), `why` (in words) and, for a connectivity report, `online`.
    var details: [JournalDetail: String] {
        switch self {
        case .startedRun(let run), .coalescedIntoRun(let run), .queuedAfterRun(let run):
            return [.fate: name, .run: "\(run)"]
        case .waitingForNetwork:
            return [.fate: name]
        case .ignored(let reason):
            var details: [JournalDetail: String] = [.fate: name, .reason: reason.name, .why: reason.description]
            details[.online] = reason.online.map { "\($0)" }
            return details
        }
    }

    /// The fate in words, as the journal's message gives it: `coalesced into run 3`.
    public var description: String {
        switch self {
        case .startedRun(let run): "started run \(run)"
        case .coalescedIntoRun(let run): "coalesced into run \(run)"
        case .queuedAfterRun(let run): "queued as the follow-up to run \(run)"
        case .waitingForNetwork: "waiting for the network"
        case .ignored(let reason): "ignored: \(reason)"
        }
    }
}
