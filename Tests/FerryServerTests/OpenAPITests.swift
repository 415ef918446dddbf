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

    @Test("every route the server answers is described with its method")
    func routes() throws {
        let lines = Self.specification.components(separatedBy: "\n")
        for (path, method) in FerryServerApplication.routes {
            let index = try #require(lines.firstIndex(of: "  \(path):"), "\(path) missing from openapi.yaml")
            #expect(lines[index + 1] == "    \(method.rawValue.lowercased()):", "\(path) should document \(method)")
        }
    }

    @Test("every error code and result status is listed")
    func enumerations() {
        let codes = ErrorCode.allCases.map(\.rawValue).joined(separator: ", ")
        #expect(Self.specification.contains("enum: [\(codes)]"))
        let statuses = MutationStatus.allCases.map(\.rawValue).joined(separator: ", ")
        #expect(Self.specification.contains("enum: [\(statuses)]"))
    }
}
