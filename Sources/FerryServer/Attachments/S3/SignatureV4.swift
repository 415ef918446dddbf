import Crypto
import Foundation

/// AWS Signature Version 4 (docs.aws.amazon.com, "Signing AWS API requests"), as S3 and every
/// S3-compatible store check it: the request's method, path, query, the headers it signs and its
/// payload's SHA-256, signed with a key derived from the secret, the day, the region and the
/// service. No SDK for it is on this machine; swift-crypto does the hashing.
struct SignatureV4: Sendable {
    let accessKey: String
    let secretKey: String
    let region: String
    var service = "s3"

    /// The SHA-256 of an empty payload, as S3 wants it for a request without a body.
    static let emptyPayloadHash = hex(SHA256.hash(data: Data()))

    /// The `Authorization` header for a request; `headers` are every header it signs, `host` and
    /// `x-amz-date` (the `date` given, written `yyyyMMdd'T'HHmmss'Z'`) among them.
    /// - Parameters:
    ///   - path: the path as sent, each segment already percent-encoded.
    ///   - query: the query's names and values, not encoded.
    func authorization(
        method: String,
        path: String,
        query: [(String, String)] = [],
        headers: [String: String],
        payloadHash: String,
        date: Date
    ) -> String {
        let (day, scope) = (Self.day(date), "\(Self.day(date))/\(region)/\(service)/aws4_request")
        let signed = headers.map { ($0.key.lowercased(), Self.trimmed($0.value)) }.sorted { $0.0 < $1.0 }
        let canonicalQuery = query.map { (Self.encoded($0.0), Self.encoded($0.1)) }.sorted { $0 < $1 }.map { "\($0)=\($1)" }
            .joined(separator: "&")
        let canonical = [
            method, path.isEmpty ? "/" : path, canonicalQuery, signed.map { "\($0):\($1)\n" }.joined(),
            signed.map(\.0).joined(separator: ";"), payloadHash,
        ]
        .joined(separator: "\n")
        let stringToSign = [
            "AWS4-HMAC-SHA256", Self.timestamp(date), scope, Self.hex(SHA256.hash(data: Data(canonical.utf8))),
        ]
        .joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(secretKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
        return "AWS4-HMAC-SHA256 Credential=\(accessKey)/\(scope), SignedHeaders=\(signed.map(\.0).joined(separator: ";")), Signature=\(signature)"
    }

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC, as `x-amz-date` carries it.
    static func timestamp(_ date: Date) -> String {
        let parts = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: date)
        return String(
            format: "%04d%02d%02dT%02d%02d%02dZ",
            parts.year ?? 0,
            parts.month ?? 0,
            parts.day ?? 0,
            parts.hour ?? 0,
            parts.minute ?? 0,
            parts.second ?? 0
        )
    }

    static func day(_ date: Date) -> String { String(timestamp(date).prefix(8)) }

    /// RFC 3986 percent-encoding of everything but unreserved characters, as SigV4 wants it.
    static func encoded(_ text: String, keepingSlashes: Bool = false) -> String {
        var allowed = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
        if keepingSlashes { allowed.insert("/") }
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// A header's value as signed: trimmed, inner runs of spaces made one.
    private static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }
}
