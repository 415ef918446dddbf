import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// The few S3 requests the attachment store makes, on AsyncHTTPClient, signed with AWS
/// Signature Version 4, path-style (`ENDPOINT/BUCKET/KEY`): what every S3-compatible store
/// answers. Bodies go out as the buffers given (the store sends at most a part at once) and
/// answers come back as streams.
struct S3Client: Sendable {
    let endpoint: URL
    let bucket: String
    let signer: SignatureV4
    var http: HTTPClient = Self.pooled
    var timeout: TimeAmount = .seconds(300)

    /// The store's own client, for the life of the process: a pool of 256 connections to the
    /// store, not the shared client's 8, so slow readers of a few attachments (a connection each
    /// until their range is read) never hold up every other request.
    static let pooled: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 256
        configuration.timeout.connect = .seconds(10)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    /// An object as a listing names it.
    struct Object: Sendable {
        var key: String
        var size: Int64
        var etag: String
        var lastModified: Date
    }

    /// An object of an upload in progress: its bytes start at `offset`.
    struct Part: Sendable {
        var key: String
        var offset: Int64
        var size: Int64
        var etag: String
    }

    /// A request's answer that was not a success: the store's code and message.
    struct Failure: Error, CustomStringConvertible {
        var status: Int
        var code: String
        var message: String
        var description: String { "the object store answered \(status) \(code): \(message)" }
    }

    /// Sends a signed request; a non-2xx answer is thrown as `Failure` (its body read), but
    /// for the statuses in `accepting`.
    func send(
        _ method: HTTPMethod,
        key: String? = nil,
        query: [(String, String)] = [],
        headers: [String: String] = [:],
        body: ByteBuffer? = nil,
        accepting: Set<Int> = []
    ) async throws -> HTTPClientResponse {
        let path = "/" + SignatureV4.encoded(bucket) + (key.map { "/" + SignatureV4.encoded($0, keepingSlashes: true) } ?? "")
        let now = Date()
        let payloadHash = body.map { SignatureV4.hex(SHA256Digest.of($0)) } ?? SignatureV4.emptyPayloadHash
        var signed = headers
        signed["host"] = endpoint.port.map { "\(endpoint.host ?? ""):\($0)" } ?? (endpoint.host ?? "")
        signed["x-amz-date"] = SignatureV4.timestamp(now)
        signed["x-amz-content-sha256"] = payloadHash
        let authorization = signer.authorization(
            method: method.rawValue,
            path: path,
            query: query,
            headers: signed,
            payloadHash: payloadHash,
            date: now
        )
        let queryText = query.map { "\(SignatureV4.encoded($0.0))=\(SignatureV4.encoded($0.1))" }.joined(separator: "&")
        var base = endpoint.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        var request = HTTPClientRequest(url: base + path + (queryText.isEmpty ? "" : "?" + queryText))
        request.method = method
        for (name, value) in signed where name != "host" { request.headers.add(name: name, value: value) }
        request.headers.add(name: "Authorization", value: authorization)
        if let body {
            request.body = .bytes(body)
        } else if [.PUT, .POST].contains(method) {
            request.body = .bytes(ByteBuffer())
        }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: timeout)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw BlobStoreUnavailable("\(method.rawValue) to \(base) failed: \(error)")
        }
        let status = Int(response.status.code)
        guard (200..<300).contains(status) || accepting.contains(status) else {
            let text = method == .HEAD ? "" : String(buffer: try await response.body.collect(upTo: 64 * 1024))
            // A HEAD answers without a body: say what its status means.
            let plain = [403: "the keys are refused (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)", 404: "no such bucket or object"][status] ?? text
            // Down, restarting or slowing requests down (503 SlowDown): the client tries again later.
            if (status >= 500 && status != 501) || status == 429 {
                throw BlobStoreUnavailable("\(method.rawValue) answered \(status): \(plain.prefix(200))")
            }
            let failure = S3Answers.failure(in: text)
            throw Failure(status: status, code: failure.code ?? "\(status)", message: failure.message ?? plain)
        }
        return response
    }

    /// The object's size; `nil` when there is none.
    func size(of key: String) async throws -> Int64? {
        let response = try await send(.HEAD, key: key, accepting: [404])
        guard response.status != .notFound else { return nil }
        return response.headers.first(name: "Content-Length").flatMap { Int64($0) }
    }

    /// The object's ETag; `nil` when there is none.
    func etag(of key: String) async throws -> String? {
        let response = try await send(.HEAD, key: key, accepting: [404])
        guard response.status != .notFound else { return nil }
        return response.headers.first(name: "ETag") ?? ""
    }

    /// Writes an object whole; returns its ETag.
    @discardableResult
    func put(_ key: String, _ body: ByteBuffer) async throws -> String {
        try await send(.PUT, key: key, body: body).headers.first(name: "ETag") ?? ""
    }

    /// Deletes an object; nothing if there is none.
    func delete(_ key: String) async throws {
        _ = try await send(.DELETE, key: key, accepting: [404])
    }

    /// Copies an object within the bucket (up to 5 GiB, S3's limit for one copy).
    func copy(_ source: String, to key: String) async throws {
        _ = try await send(.PUT, key: key, headers: ["x-amz-copy-source": "/\(bucket)/\(SignatureV4.encoded(source, keepingSlashes: true))"])
    }

    /// Every object whose key starts with `prefix` (and, with `startAfter`, sorts after it), in key order.
    func list(prefix: String, startAfter: String? = nil) async throws -> [Object] {
        var objects: [Object] = []
        var token: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", prefix)]
            if let startAfter { query.append(("start-after", startAfter)) }
            if let token { query.append(("continuation-token", token)) }
            let text = String(buffer: try await send(.GET, query: query).body.collect(upTo: 16 * 1024 * 1024))
            guard let page = S3Answers.decode(S3Answers.Listing.self, from: text) else {
                throw Failure(status: 200, code: "NoListing", message: "ListObjectsV2 answered no listing: \(text.prefix(200))")
            }
            for entry in page.contents ?? [] {
                let modified = entry.lastModified.flatMap(Self.date) ?? .distantPast
                objects.append(Object(key: entry.key, size: entry.size, etag: entry.eTag ?? "", lastModified: modified))
            }
            token = page.isTruncated == true ? page.nextContinuationToken : nil
        } while token != nil
        return objects.sorted { $0.key < $1.key }
    }

    // MARK: Multipart uploads

    func createMultipart(_ key: String) async throws -> String {
        let text = String(buffer: try await send(.POST, key: key, query: [("uploads", "")]).body.collect(upTo: 64 * 1024))
        guard let id = S3Answers.decode(S3Answers.CreatedUpload.self, from: text)?.uploadId else {
            throw Failure(status: 200, code: "NoUploadId", message: "CreateMultipartUpload answered no UploadId")
        }
        return id
    }

    /// Uploads part `number` (from 1); returns its ETag.
    func uploadPart(_ key: String, id: String, number: Int, _ body: ByteBuffer) async throws -> String {
        let response = try await send(.PUT, key: key, query: [("partNumber", "\(number)"), ("uploadId", id)], body: body)
        return response.headers.first(name: "ETag") ?? ""
    }

    /// Copies the object `source` in as part `number` (from 1), inside the store; returns the part's ETag.
    func uploadPartCopy(_ key: String, id: String, number: Int, from source: String) async throws -> String {
        let response = try await send(
            .PUT,
            key: key,
            query: [("partNumber", "\(number)"), ("uploadId", id)],
            headers: ["x-amz-copy-source": "/\(bucket)/\(SignatureV4.encoded(source, keepingSlashes: true))"]
        )
        let text = String(buffer: try await response.body.collect(upTo: 64 * 1024))
        guard let etag = S3Answers.decode(S3Answers.CopiedPart.self, from: text)?.eTag else {
            throw Failure(
                status: 200,
                code: S3Answers.failure(in: text).code ?? "NoETag",
                message: "UploadPartCopy answered no ETag: \(text.prefix(200))"
            )
        }
        return etag
    }

    func completeMultipart(_ key: String, id: String, parts: [String]) async throws {
        let list = parts.enumerated().map { "<Part><PartNumber>\($0.offset + 1)</PartNumber><ETag>\($0.element)</ETag></Part>" }.joined()
        let response = try await send(
            .POST,
            key: key,
            query: [("uploadId", id)],
            body: ByteBuffer(string: "<CompleteMultipartUpload>\(list)</CompleteMultipartUpload>")
        )
        // S3 may answer 200 with an error in the body.
        let text = String(buffer: try await response.body.collect(upTo: 64 * 1024))
        if text.contains("<Error>") {
            let failure = S3Answers.failure(in: text)
            throw Failure(status: 200, code: failure.code ?? "", message: failure.message ?? text)
        }
    }

    func abortMultipart(_ key: String, id: String) async throws {
        _ = try await send(.DELETE, key: key, query: [("uploadId", id)], accepting: [404])
    }

    private static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text)
    }
}

/// SHA-256 of a buffer's readable bytes.
enum SHA256Digest {
    static func of(_ buffer: ByteBuffer) -> [UInt8] {
        Array(SHA256.hash(data: buffer.readableBytesView))
    }
}
