import Ferry
import FerryServer
import Foundation

/// A `ferry serve` process for the server-side benchmarks, its devices, and measurements that
/// carry its peak memory.
struct BenchServer {
    let server: ServerProcess
    let folder: URL
    let records: Int
    private let baseURL: URL
    private let authority: TokenAuthority
    private let transport: @Sendable (URL) -> any SyncTransport

    init(folder: URL, database: String, records: Int, transport: @escaping @Sendable (URL) -> any SyncTransport) async throws {
        let secret = TokenAuthority.randomSecret()
        let server = try ServerProcess(
            arguments: ["serve", "--database", database, "--port", "0", "--jwt-secret", secret, "--rate-limit", "off"],
            log: folder.appendingPathComponent("serve.log")
        )
        do {
            baseURL = URL(string: "http://127.0.0.1:\(try await server.port())")!
            authority = try await TokenAuthority(secret: secret)
        } catch {
            server.stop()
            throw error
        }
        self.server = server
        self.folder = folder
        self.records = records
        self.transport = transport
    }

    /// A device of `user` with a store of its own, named `name`.
    func device(_ name: String, of user: String) async throws -> FerryClient {
        let store = try FerryStore(
            path: folder.appendingPathComponent("\(name).sqlite").path,
            schema: Benchmarks.schema(),
            tables: [Benchmarks.table]
        )
        let token = try await authority.issue(userID: user, ttl: .seconds(24 * 3600))
        return FerryClient(store: store, transport: transport(baseURL), token: { token })
    }

    /// `body` measured, with the server's peak memory over the same span.
    func measure(_ body: () async throws -> Int) async throws -> BenchMeasurement {
        server.resetPeakMemory()
        var measurement = try await BenchMeasurement.measure(items: records) { (try await body(), nil) }
        measurement.serverPeakMemoryMB = server.peakMemoryMB
        return measurement
    }
}
