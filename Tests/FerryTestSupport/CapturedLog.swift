import Logging
import Synchronization

/// Every line a logger wrote, at every level, as text: for tests that read a server's log.
public final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    /// The lines at `info` and above of every logger made from now on in this test process,
    /// which go on to standard error as before. `LoggingSystem` takes one bootstrap per
    /// process: this is it, made on first use.
    public static let processWide: CapturedLog = {
        let log = CapturedLog()
        LoggingSystem.bootstrap { label in
            var captured = Handler(log: log)
            captured.logLevel = .info
            captured.metadata["label"] = "\(label)"
            return MultiplexLogHandler([StreamLogHandler.standardError(label: label), captured])
        }
        return log
    }()

    /// A logger at `trace` level whose lines land here.
    public func logger(label: String = "ferry.test") -> Logger {
        var logger = Logger(label: label) { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    public var text: [String] { lines.withLock { $0 } }

    fileprivate func append(_ line: String) { lines.withLock { $0.append(line) } }

    private struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(metadataProvider?.get() ?? [:]) { $1 }.merging(event.metadata ?? [:]) { $1 }
            let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            log.append("\(event.level) \(event.message) \(fields)\(event.error.map { " error=\($0)" } ?? "")")
        }
    }
}
