extension Collection where Element: Sendable {
    /// `transform` of every element, at most `width` running at once, in the collection's order:
    /// requests to a store that each wait on it (a part's copy, an attachment's `HEAD`), where one
    /// at a time would wait for the sum of them and all at once would swamp it.
    package func concurrentMap<T: Sendable>(
        atOnce width: Int,
        _ transform: @escaping @Sendable (Element) async throws -> T
    ) async throws -> [T] {
        var results = [T?](repeating: nil, count: count)
        try await withThrowingTaskGroup(of: (Int, T).self) { group in
            for (index, element) in enumerated() {
                if index >= width, let (done, value) = try await group.next() { results[done] = value }
                group.addTask { (index, try await transform(element)) }
            }
            for try await (done, value) in group { results[done] = value }
        }
        return results.compactMap { $0 }  // every index was set: the group ran every task
    }
}
