import Foundation

/// Where attachments' bytes live, as `ferry serve --attachments` names it (PROTOCOL.md,
/// "Attachments"): `file:FOLDER`, `s3://BUCKET?endpoint=URL&region=R` (keys from the
/// environment's `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`), or `off`.
public enum BlobStoreURL: Sendable, Equatable {
    /// A folder on this machine (`FileBlobStore`).
    case file(folder: String)
    /// A bucket of an S3-compatible store at `endpoint`, its keys under `prefix` (`S3BlobStore`).
    case s3(bucket: String, endpoint: URL, region: String, prefix: String)
    /// No attachments: the endpoints answer `404`.
    case off

    /// Reads `text`; what is wrong with it is thrown as a message saying what to write.
    public init(parsing text: String) throws(BlobStoreURLProblem) {
        if text == "off" {
            self = .off
        } else if text.hasPrefix("file:"), text.count > 5 {
            self = .file(folder: String(text.dropFirst(5)))
        } else if text.hasPrefix("s3://"), let components = URLComponents(string: text), let bucket = components.host, !bucket.isEmpty {
            let items = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
            let unknown = Set(items.keys).subtracting(["endpoint", "region", "prefix"])
            guard unknown.isEmpty else {
                throw BlobStoreURLProblem("\(text): unknown setting \(unknown.sorted().joined(separator: ", ")); use endpoint, region, prefix")
            }
            guard let endpointText = items["endpoint"], let endpoint = URL(string: endpointText), ["http", "https"].contains(endpoint.scheme),
                endpoint.host != nil
            else {
                throw BlobStoreURLProblem("\(text): say where the store answers, like s3://\(bucket)?endpoint=http://127.0.0.1:8333&region=us-east-1")
            }
            self = .s3(
                bucket: bucket,
                endpoint: endpoint,
                region: items["region"].flatMap { $0.isEmpty ? nil : $0 } ?? "us-east-1",
                prefix: items["prefix"] ?? ""
            )
        } else {
            throw BlobStoreURLProblem("\(text): write file:FOLDER, s3://BUCKET?endpoint=URL&region=REGION, or off")
        }
    }

    /// Opens the store; `nil` for `off`. An S3 store takes its keys from `environment` and
    /// checks that the bucket answers.
    public func open(environment: [String: String] = ProcessInfo.processInfo.environment) async throws -> (any BlobStore)? {
        switch self {
        case .off:
            return nil
        case .file(let folder):
            return try await FileBlobStore(folder: folder)
        case .s3(let bucket, let endpoint, let region, let prefix):
            guard let accessKey = environment["AWS_ACCESS_KEY_ID"], let secretKey = environment["AWS_SECRET_ACCESS_KEY"] else {
                throw BlobStoreURLProblem("s3://\(bucket): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
            }
            return try await S3BlobStore(
                endpoint: endpoint,
                bucket: bucket,
                region: region,
                accessKey: accessKey,
                secretKey: secretKey,
                prefix: prefix
            )
        }
    }
}

/// Why an attachment store's URL cannot be used, written for the operator.
public struct BlobStoreURLProblem: Error, Sendable, CustomStringConvertible {
    /// What is wrong, and what to write instead.
    public var message: String
    init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}
