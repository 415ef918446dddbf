extension Duration {
    /// The duration in seconds, fractions included: what timers, rate limits, logs and reports count in.
    package var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// The duration in whole milliseconds, rounded down.
    package var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
