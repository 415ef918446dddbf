import Ferry

/// Reads scheduler events until one matches.
struct EventReader {
    var iterator: AsyncStream<SyncScheduler.Event>.Iterator

    init(_ stream: AsyncStream<SyncScheduler.Event>) { iterator = stream.makeAsyncIterator() }

    mutating func next(where matches: (SyncScheduler.Event) -> Bool) async -> SyncScheduler.Event? {
        while let event = await iterator.next() {
            if matches(event) { return event }
        }
        return nil
    }

    mutating func runStarted() async -> (Int, SyncKind)? {
        guard case .runStarted(let number, let kind) = await next(where: { if case .runStarted = $0 { true } else { false } }) else { return nil }
        return (number, kind)
    }

    mutating func runFinished() async -> Int? {
        guard case .runFinished(let number, _) = await next(where: { if case .runFinished = $0 { true } else { false } }) else { return nil }
        return number
    }
}
