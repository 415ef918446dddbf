import Testing

@testable import Ferry

/// How often a transfer's progress reaches observers (issue 50): a screen wants a few updates a
/// second whatever the link, not one per 16 KiB the network delivers.
@Suite("Transfer meter")
struct TransferMeterTests {
    static let start = ContinuousClock.now

    @Test("a fast 50 MB transfer is told about 100 times, in steps of 1%, and at its end")
    func fastTransfer() {
        var meter = TransferMeter(AttachmentTransfer(digest: "d", direction: .download, totalBytes: 50_000_000), now: Self.start)
        var told: [Int64] = []
        for chunk in 0..<3_052 {  // 16 KiB chunks, a microsecond apart
            let arrived = min(16_384, 50_000_000 - Int64(chunk) * 16_384)
            if let telling = meter.add(arrived, now: Self.start + .microseconds(chunk)) { told.append(telling.transfer.bytesDone) }
        }
        #expect((95...101).contains(told.count), "\(told.count) tellings")
        #expect(told.last == 50_000_000)
    }

    @Test("a slow link is told four times a second while bytes move, and not while they do not")
    func slowLink() {
        var meter = TransferMeter(AttachmentTransfer(digest: "d", direction: .upload, totalBytes: 100_000_000), now: Self.start)
        var tellings = 0
        for tick in 1...40 {  // 10 seconds of 4 KiB every 250 ms: far below a 1% step
            if meter.add(4_096, now: Self.start + .milliseconds(250 * tick)) != nil { tellings += 1 }
        }
        #expect(tellings == 40)
        #expect(meter.add(0, now: Self.start + .seconds(20)) == nil, "nothing moved: nothing to tell")
        #expect(meter.add(1, now: Self.start + .seconds(20) + .milliseconds(10))?.moved == 1, "moved, and overdue since the last telling")
    }
}
