import AsyncHTTPClient
import Ferry
import FerryProtocol
import Foundation
import NIOCore
import NIOHTTP1

/// `SyncTransport` over AsyncHTTPClient, for the command line on Linux.
///
/// Apps use `URLSessionTransport`. On Linux, swift-corelibs-foundation's URLSession re-arms a
/// dispatch timer on every chunk a request reads or writes, and a third of a large upload's
/// CPU went to that timer alone (BENCHMARKS.md); the CLI talks through SwiftNIO instead.
struct HTTPClientTransport: SyncTransport {
    let baseURL: URL
    var client: HTTPClient = .shared
    /// The most one request may take, answer included.
    var timeout: TimeAmount = .seconds(120)
    /// Larger than any answer the protocol allows: a push's results, each with a current record
    /// of the largest data (measured encoded, as it is sent) and room for its id, key and
    /// envelope. A pull page is smaller: 4 MiB of data past its first record, and an envelope for
    /// each of at most 10,000 changes.
    static let maxResponseBytes = ProtocolLimits.maxMutationsPerPush * (ProtocolLimits.maxDataBytes + 4096)

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        let response = try await client.execute(try outgoing(request), timeout: timeout)
        let body = try await response.body.collect(upTo: Self.maxResponseBytes)
        return TransportResponse(status: Int(response.status.code), headers: Self.headers(of: response), body: Data(body.readableBytesView))
    }

    /// Streams the answer's body as it arrives; no deadline (the stream lasts as long as the
    /// token), and stopping the read cancels the request, which closes its connection.
    func openStream(_ request: TransportRequest) async throws -> TransportStream {
        let response = try await client.execute(try outgoing(request), deadline: .distantFuture)
        let headers = Self.headers(of: response)
        let (body, chunks) = AsyncThrowingStream.makeStream(of: Data.self)
        let reader = Task {
            do {
                for try await buffer in response.body { chunks.yield(Data(buffer.readableBytesView)) }
                chunks.finish()
            } catch {
                chunks.finish(throwing: error)
            }
        }
        chunks.onTermination = { _ in reader.cancel() }
        return TransportStream(status: Int(response.status.code), headers: headers, body: body)
    }

    private func outgoing(_ request: TransportRequest) throws -> HTTPClientRequest {
        guard let url = request.url(on: baseURL) else {
            throw FerryError.protocolViolation("cannot build a URL from \(request.path)")
        }
        var outgoing = HTTPClientRequest(url: url.absoluteString)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
        if let body = request.body { outgoing.body = .bytes(ByteBuffer(bytes: body)) }
        return outgoing
    }

    private static func headers(of response: HTTPClientResponse) -> [String: String] {
        var headers: [String: String] = [:]
        for header in response.headers { headers[header.name] = header.value }
        return headers
    }
}
