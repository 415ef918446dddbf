import Ferry
import FerryTestSupport
import Foundation
import Testing

@Suite("Transport", .timeLimit(.minutes(1)))
struct TransportTests {
    @Test("a request's path is appended to the server address, whose own path stays as a prefix")
    func pathsKeepTheServersPrefix() throws {
        let push = TransportRequest(method: "POST", path: "/v1/push")
        let pull = TransportRequest(method: "GET", path: "/v1/pull?cursor=c1.abc&limit=1000")
        #expect(push.url(on: URL(string: "https://example.com")!)?.absoluteString == "https://example.com/v1/push")
        #expect(push.url(on: URL(string: "https://example.com/")!)?.absoluteString == "https://example.com/v1/push")
        #expect(push.url(on: URL(string: "https://example.com/sync")!)?.absoluteString == "https://example.com/sync/v1/push")
        #expect(push.url(on: URL(string: "https://example.com/sync//")!)?.absoluteString == "https://example.com/sync/v1/push")
        #expect(
            pull.url(on: URL(string: "http://127.0.0.1:8080/api/ferry/")!)?.absoluteString
                == "http://127.0.0.1:8080/api/ferry/v1/pull?cursor=c1.abc&limit=1000"
        )
    }

    @Test("URLSessionTransport reaches a real server through an address with a trailing slash")
    func trailingSlash() async throws {
        try await TestServer.run { server in
            let transport = URLSessionTransport(baseURL: URL(string: server.baseURL + "/")!)
            let response = try await transport.send(TransportRequest(method: "GET", path: "/v1/health"))
            #expect(response.status == 200)
        }
    }
}
