// The field-service company's own server: Ferry's server with the company's rules
// (FieldServiceRules) and a mail log standing in for its mail service. Run by
// scripts/run-example.sh; `ferry serve` is the same server without rules.
//
//   FERRY_JWT_SECRET=… FieldServiceServer --database PATH|URL --mail-log PATH [--port N]
//
// `--database` is a SQLite file's path or a URL as `ferry serve` takes it (sqlite:PATH,
// postgres://…): several processes on one database deliver each email once between them.
// FIELD_SERVICE_MAIL_DOWN=1 stands for a mail service that is down: every delivery fails and is
// tried again later (what a test kills the process in the middle of);
// FIELD_SERVICE_EFFECT_LEASE_SECONDS shortens how long a process holds an email it took.
import FerryServer
import FieldServiceRules
import Foundation
import Logging
import ServiceLifecycle

/// Each email as one line of a file, once per effect key, as a real mail service would be
/// called with the key as its idempotency key.
actor MailLog: SideEffectHandler {
    let path: String
    private var sent: Set<String>

    init(path: String) {
        self.path = path
        let lines = (try? String(contentsOfFile: path, encoding: .utf8))?.split(separator: "\n") ?? []
        sent = Set(lines.compactMap { $0.split(separator: " ").first.map(String.init) })
    }

    func deliver(_ effect: DeliverableEffect) async throws {
        if ProcessInfo.processInfo.environment["FIELD_SERVICE_MAIL_DOWN"] == "1" { throw MailServiceDown() }
        guard !sent.contains(effect.key) else { return }  // delivered before a crash kept it from being marked
        let line = "\(effect.key) \(effect.kind) \(effect.payload["job"]?.stringValue ?? "?")\n"
        // Appended in one write: lines of several processes on one log never overwrite each other.
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
        guard descriptor >= 0 else { throw CocoaError(.fileWriteNoPermission) }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        try handle.write(contentsOf: Data(line.utf8))
        try handle.close()
        sent.insert(effect.key)
    }

    struct MailServiceDown: Error, CustomStringConvertible {
        var description: String { "the mail service is down" }
    }
}

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    return arguments.firstIndex(of: name).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
}

guard let secret = ProcessInfo.processInfo.environment["FERRY_JWT_SECRET"], let database = option("--database"),
    let mailLog = option("--mail-log")
else {
    FileHandle.standardError.write(Data("usage: FERRY_JWT_SECRET=… FieldServiceServer --database PATH|URL --mail-log PATH [--port N]\n".utf8))
    exit(64)
}
let storage: any SyncStorage
do {
    let isURL = ["sqlite:", "postgres://", "postgresql://"].contains { database.hasPrefix($0) }
    switch try DatabaseURL(parsing: isURL ? database : "sqlite:\(database)") {
    case .sqlite(let path): storage = try SQLiteSyncStorage(path: path)
    case .postgres(let location): storage = try await PostgresSyncStorage.connect(to: location, poolSize: 4)
    }
} catch {
    FileHandle.standardError.write(Data("FieldServiceServer: \(error)\n".utf8))
    exit(1)
}
var logger = Logger(label: "field-service")
logger.logLevel = .warning
var configuration = ServerConfiguration(port: Int(option("--port") ?? "8080") ?? 8080, jwtSecret: secret)
configuration.rules = ServerRules([JobRules()])
configuration.sideEffects = MailLog(path: mailLog)
// A test's short lease: an email a killed process held goes to another within seconds.
if let lease = ProcessInfo.processInfo.environment["FIELD_SERVICE_EFFECT_LEASE_SECONDS"].flatMap(Int.init) {
    configuration.sideEffectLease = .seconds(lease)
}
let app = try await FerryServerApplication.make(
    configuration: configuration,
    storage: storage,
    logger: logger,
    // Unbuffered: the script reads the address from the log as soon as it is written.
    onServerRunning: { port in FileHandle.standardOutput.write(Data("Field service server listening on http://127.0.0.1:\(port)\n".utf8)) }
)
try await ServiceGroup(services: [app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger).run()
