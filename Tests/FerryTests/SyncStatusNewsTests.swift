import Testing

@testable import Ferry

/// What status observers hear: `FerryError` is equal to another of its code, so a status that
/// differs only in its failure's words must still reach them (`SyncStatus.isNews(after:)`).
@Suite("Status news")
struct SyncStatusNewsTests {
    static func failed(_ error: FerryError) -> SyncStatus {
        var status = SyncStatus(phase: .failed(error))
        status.lastError = error
        return status
    }

    @Test("a second failure of one code with new words is news; the same failure again, or the same status, is not")
    func failuresByTheirWords() {
        let timedOut = Self.failed(.unreachable("timed out"))
        let refused = Self.failed(.unreachable("connection refused"))
        #expect(timedOut == refused, "FerryError is equal by code")
        #expect(refused.isNews(after: timedOut))
        #expect(!timedOut.isNews(after: Self.failed(.unreachable("timed out"))))
        #expect(SyncStatus(phase: .idle).isNews(after: timedOut))
        #expect(!SyncStatus(phase: .idle).isNews(after: SyncStatus(phase: .idle)))
    }
}
