import Ferry
import FerryTestSupport
import Foundation
import GRDB
import Testing

/// `FerryError` as an app keeps it: a stable code to switch on, equal by code, with the error
/// underneath where there was one.
@Suite("FerryError")
struct FerryErrorTests {
    @Test("codes are stable names; errors are equal by code, whatever their messages say")
    func equalByCode() {
        let codes: [FerryError.Code] = [
            .invalidTable, .unauthorized, .protocolViolation, .unreachable, .leaseLost, .unreadableStore, .stopped, .interrupted,
            .readOnlySpace, .refused,
        ]
        #expect(
            codes.map(\.rawValue) == [
                "invalidTable", "unauthorized", "protocolViolation", "unreachable", "leaseLost", "unreadableStore", "stopped",
                "interrupted", "readOnlySpace", "refused",
            ]
        )
        #expect(FerryError.unreachable("offline") == FerryError.unreachable("timed out, after 8 attempts"))
        #expect(FerryError.unreachable("offline") != FerryError.stopped("offline"))
        #expect(FerryError.Code(rawValue: "somethingNew") != .unreachable)
        let refused = FerryError.refused(code: "forbidden", message: "alice is a reader of company")
        #expect(refused.serverCode == "forbidden" && refused.message == "alice is a reader of company")
        #expect(refused.description == "the server refused the request (forbidden): alice is a reader of company")
    }

    @Test("catch FerryError.Code.x matches that code only, and no other kind of error")
    func patternMatchesTheCodeOnly() {
        func caught(_ error: any Error) -> String {
            do { throw error } catch FerryError.Code.unreachable { return "unreachable" } catch FerryError.Code.stopped {
                return "stopped"
            } catch { return "other" }
        }
        #expect(caught(FerryError.unreachable("offline")) == "unreachable")
        #expect(caught(FerryError.stopped("nobody is signed in")) == "stopped")
        #expect(caught(FerryError.leaseLost("another process took over")) == "other")
        #expect(caught(URLError(.notConnectedToInternet)) == "other")
        #expect(caught(CancellationError()) == "other")
    }

    @Test("a store file that is not SQLite: unreadableStore, with SQLite's error underneath")
    func unreadableStoreCarriesSQLitesError() throws {
        let path = ClientFixture.storePath()
        try Data("not a database, just some text that is long enough to be read as a header".utf8).write(to: URL(fileURLWithPath: path))
        #expect {
            try ClientFixture.openStore(at: path)
        } throws: { error in
            guard let error = error as? FerryError, error.code == .unreadableStore else { return false }
            return (error.underlying as? DatabaseError)?.resultCode == .SQLITE_NOTADB
        }
    }

    @Test("the network failing until the retry budget is spent: unreachable, with the last network error underneath")
    func unreachableCarriesTheNetworkError() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('r', 1)") }
            let down = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { _, _ in
                throw URLError(.networkConnectionLost)
            }
            var configuration = SyncConfiguration()
            configuration.retry = RetryPolicy(initialDelay: .zero, maximumDelay: .zero, maximumAttempts: 2)
            await #expect {
                try await ClientFixture.client(store: store, server: server, transport: down, configuration: configuration).sync()
            } throws: { error in
                guard let error = error as? FerryError, error.code == .unreachable else { return false }
                return (error.underlying as? URLError)?.code == .networkConnectionLost
            }
        }
    }

    @Test("an answer the client cannot decode: protocolViolation, with what failed to decode underneath")
    func protocolViolationCarriesTheDecodingError() async throws {
        try await TestServer.run { server in
            let store = try ClientFixture.openStore(at: ClientFixture.storePath())
            try await store.database.write { db in try db.execute(sql: "INSERT INTO events (id, value) VALUES ('r', 1)") }
            let garbled = InterceptingTransport(URLSessionTransport(baseURL: URL(string: server.baseURL)!)) { request, next in
                var response = try await next(request)
                if request.path == "/v1/push" { response.body = Data(#"{"results": "not a list"}"#.utf8) }
                return response
            }
            await #expect {
                try await ClientFixture.client(store: store, server: server, transport: garbled).sync()
            } throws: { error in
                guard let error = error as? FerryError, error.code == .protocolViolation, let underlying = error.underlying else {
                    return false
                }
                return error.message == "push response is not valid: \(underlying)"
            }
        }
    }
}
