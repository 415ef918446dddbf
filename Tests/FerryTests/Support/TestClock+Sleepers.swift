import Clocks

extension TestClock<Duration> {
    /// Waits until something sleeps on the clock, so that advancing it is not lost.
    func untilSomeoneSleeps() async {
        while (try? await checkSuspension()) != nil { await Task.yield() }
    }
}
