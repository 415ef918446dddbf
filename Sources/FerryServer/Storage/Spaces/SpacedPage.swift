import FerryProtocol

/// A space the user can read, as a pull's snapshot saw it.
struct ReadableSpace: Sendable {
    var key: Int64
    var id: String
    var role: SpaceRole
    /// The head of the space's history (on SQLite, the one history's, with the space's purge horizon).
    var head: ChangeHead
    /// The last position the space's rows hold: nothing to read when the cursor stands there.
    var last: Int64
}

/// Assembles one pull page over the personal space and the spaces the user reads
/// (`PullPosition`): the personal history first, then each space in order of key, each read as
/// a personal pull reads the user's history, with what the page has left of its records and
/// bytes. A history read to its end stands at its head in the next cursor; the first that
/// fills the page stands after its last row read, and the spaces after it keep their positions
/// (or, just joined, are not named yet), so the next page goes on where this one stopped.
struct SpacedPage {
    let limit: Int
    let ownWrites: OwnWrites?
    let userID: String
    let from: PullPosition?
    private(set) var changes = PageChanges()
    private(set) var next: PullPosition
    /// A history stopped before its end: more follows.
    private(set) var stopped = false
    /// The personal read found nothing after the cursor, and left nothing out.
    private let personalUntouched: Bool

    /// A page after `from`, whose personal part `personal` read (the builder the engine fed, from `start`).
    init(
        from: PullPosition?,
        personal: PullPage.Builder,
        head: ChangeHead,
        start: PullCursor,
        limit: Int,
        ownWrites: OwnWrites?,
        userID: String
    ) {
        self.from = from
        self.limit = limit
        self.ownWrites = ownWrites
        self.userID = userID
        changes = personal.changes
        stopped = personal.stopped
        personalUntouched = personal.changes.isEmpty && !personal.stopped && personal.position == start.position
        next = PullPosition(personal: head.cursor(after: personal.position, from: start, caughtUp: !personal.stopped))
    }

    /// The spaces the cursor named that the user no longer reads, by key.
    func revoked(readable: [ReadableSpace]) -> [Int64] {
        let keys = Set(readable.map(\.key))
        return (from?.spaces.keys).map { $0.filter { !keys.contains($0) }.sorted() } ?? []
    }

    /// Where `space`'s read starts: the cursor's position in it, or its beginning without
    /// tombstones (the device never had its records). Throws `cursor_expired` as `ChangeHead` does.
    func start(of space: ReadableSpace) throws(ProtocolViolation) -> PullCursor {
        try space.head.start(from: from?.spaces[space.key])
    }

    /// Whether `space` has rows to read after `start` while the page has room; a space with
    /// none is caught up without a read.
    mutating func needsRead(_ space: ReadableSpace, from start: PullCursor) -> Bool {
        if stopped {
            // The page is full: the space keeps its position, or waits to be joined.
            if let kept = from?.spaces[space.key] { next.spaces[space.key] = kept }
            return false
        }
        if space.last <= start.position {
            next.spaces[space.key] = space.head.cursor(after: start.position, from: start, caughtUp: true)
            return false
        }
        return true
    }

    /// The builder for `space`'s rows, with what is left of the page. A space being joined
    /// leaves none of the client's writes out (`SpacedPage.leavesOut`).
    func builder(for space: ReadableSpace, from start: PullCursor) -> PullPage.Builder {
        PullPage.Builder(
            after: start.position,
            limit: limit - changes.count,
            leavingOut: Self.leavesOut(ownWrites, joining: from?.spaces[space.key], userID: userID),
            budget: ProtocolLimits.maxPullPageDataBytes - changes.dataBytes,
            takesFirst: changes.isEmpty,
            space: space.id
        )
    }

    /// The writes a read of a space leaves out: none while the space is being joined (the cursor
    /// does not name it yet, or names it with the horizon of a join not yet caught up): the
    /// device may have dropped them with the space (revoked, or deleted and created again) since
    /// they were answered, and joining brings the space whole.
    static func leavesOut(_ ownWrites: OwnWrites?, joining entry: PullCursor?, userID: String) -> OwnWrites? {
        guard let entry, entry.horizon == 0 else { return nil }
        return ownWrites.map { OwnWrites(clientID: SpacePartition.writer(clientID: $0.clientID, userID: userID), answered: $0.answered) }
    }

    /// Takes what `builder` read of `space`.
    mutating func add(_ builder: PullPage.Builder, of space: ReadableSpace, from start: PullCursor) {
        changes.append(contentsOf: builder.changes)
        stopped = builder.stopped
        next.spaces[space.key] = space.head.cursor(after: builder.position, from: start, caughtUp: !builder.stopped)
        if builder.stopped { next.continuing = space.key }
    }

    /// The page, its cursor signed by `cursors`, with the memberships of `version`: sent only
    /// when they are not the ones the request's cursor was read with (always without a cursor).
    func page(cursors: CursorCodec, spaces: [ReadableSpace], version: Int64, revoked: [String]) -> PullPage {
        var next = next
        next.memberships = version
        return PullPage(
            changes: changes,
            cursor: cursors.encode(next, userID: userID),
            hasMore: stopped,
            spaces: from.map { $0.memberships == version } == true
                ? nil
                : spaces.map { Membership(space: $0.id, role: $0.role, incarnation: SpaceRules.incarnation(of: $0.key)) }.sorted {
                    $0.space < $1.space
                },
            revoked: revoked
        )
    }

    /// The page of a pull that went on reading the space its cursor stopped in
    /// (`PullPosition.continuing`) and stopped in it again: that space moves on, everything
    /// else keeps its position, and the memberships (unchanged) are not sent.
    static func continuing(
        from: PullPosition,
        in space: ReadableSpace,
        read builder: PullPage.Builder,
        start: PullCursor,
        userID: String,
        cursors: CursorCodec
    ) -> PullPage {
        var next = from
        next.spaces[space.key] = space.head.cursor(after: builder.position, from: start, caughtUp: false)
        return PullPage(changes: builder.changes, cursor: cursors.encode(next, userID: userID), hasMore: true)
    }

    /// The page when nothing changed in any space (`PullPosition.spacesUnchanged`): the spaces
    /// keep their positions, and the memberships are not sent. When nothing lies after the
    /// personal position either, the request's own `cursor` is the answer's: every position in
    /// it is still where nothing of the user's follows, and an empty pull of a user in 1,000
    /// spaces then neither encodes nor signs 8 KB again.
    func pageWithSpacesUnchanged(cursors: CursorCodec, cursor: String?) -> PullPage {
        if let cursor, from != nil, personalUntouched { return PullPage(changes: PageChanges(), cursor: cursor, hasMore: false) }
        var next = next
        next.spaces = from?.spaces ?? [:]
        next.memberships = from?.memberships ?? 0
        return PullPage(changes: changes, cursor: cursors.encode(next, userID: userID), hasMore: stopped, spaces: from == nil ? [] : nil)
    }
}
