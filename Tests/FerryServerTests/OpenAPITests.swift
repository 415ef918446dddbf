import FerryProtocol
import FerryTestSupport
import Foundation
import Testing

@testable import FerryServer

/// Keeps `openapi.yaml` in step with the server: every route, error code and result status appears there.
@Suite("OpenAPI", .timeLimit(.minutes(1)))
struct OpenAPITests {
    static let specification: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("openapi.yaml"), encoding: .utf8)) ?? ""
    }()

    /// The routes of the server's own router, as `METHOD path`: a route added there and nowhere
    /// else is found, and so is one the error middleware's table (for 405 answers) lacks.
    static func routerRoutes() async throws -> [String] {
        let storage = try SQLiteSyncStorage(path: nil)
        let blobs = try await FileBlobStore(folder: FileManager.default.temporaryDirectory.appendingPathComponent("openapi-\(UUID())").path)
        let router = FerryServerApplication.router(
            controller: SyncController(storage: storage, metrics: ServerMetrics()),
            attachments: AttachmentController(storage: storage, blobs: blobs, maxAttachmentBytes: 1 << 30),
            authority: try await TokenAuthority(secret: String(repeating: "s", count: 32)),
            limiter: nil,
            metrics: ServerMetrics(),
            logger: .init(label: "test")
        )
        return router.routes.map { "\($0.method.rawValue) \($0.path)" }.sorted()
    }

    @Test("every route the server's router answers is described with its method, and the error middleware knows it")
    func routes() async throws {
        let routes = try await Self.routerRoutes()
        #expect(routes.count == 18, "\(routes)")
        let lines = Self.specification.components(separatedBy: "\n")
        for route in routes {
            let (method, path) = (String(route.prefix { $0 != " " }), String(route.drop { $0 != " " }.dropFirst()))
            let index = try #require(lines.firstIndex(of: "  \(path):"), "\(path) missing from openapi.yaml")
            let operations = lines[(index + 1)...].prefix { $0.hasPrefix("   ") || $0.isEmpty }
            #expect(operations.contains("    \(method.lowercased()):"), "\(path) should document \(method)")
        }
        let table = FerryServerApplication.routes.flatMap { path, methods in methods.map { "\($0.rawValue) \(path)" } }.sorted()
        #expect(table == routes, "ErrorEnvelopeMiddleware's table must list exactly the router's routes")
    }

    @Test("every error code and result status is listed")
    func enumerations() {
        let codes = ErrorCode.allCases.map(\.rawValue).joined(separator: ", ")
        #expect(Self.specification.contains("enum: [\(codes)]"))
        let statuses = MutationStatus.allCases.map(\.rawValue).joined(separator: ", ")
        #expect(Self.specification.contains("enum: [\(statuses)]"))
    }
}
