import Ferry
import Foundation

/// "Synced 2,500 of 5,000 (50%)": rewritten in place on a terminal, one line per step otherwise.
final class ProgressPrinter: Sendable {
    let live: Bool
    init(live: Bool) { self.live = live }

    /// Shows upload progress; other phases are left to the caller's own lines.
    func show(_ status: SyncStatus) {
        guard case .uploading(_, let total) = status.phase, total > 0 else { return }
        show(status.progressText)
    }

    func show(_ text: String) {
        if live {
            FileHandle.standardOutput.write(Data(("\r\u{1B}[K" + text).utf8))
        } else {
            printNow(text)
        }
    }

    func finish() {
        if live { FileHandle.standardOutput.write(Data("\r\u{1B}[K".utf8)) }
    }
}
