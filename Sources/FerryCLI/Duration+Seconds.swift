extension Duration {
    /// The duration in seconds, as the command line reports it.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
