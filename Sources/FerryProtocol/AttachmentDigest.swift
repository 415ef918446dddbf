/// An attachment's name: the SHA-256 of its bytes, written `sha256:` and 64 lowercase hex
/// digits. The same bytes are the same attachment (ATTACHMENTS.md, "The model").
public struct AttachmentDigest: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The 64 lowercase hex digits.
    public let hex: String

    /// The digest `text` names, or `nil` when it is not `sha256:` and 64 lowercase hex digits.
    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 71, text.hasPrefix("sha256:"),
            utf8[7...].allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
        else { return nil }
        hex = String(decoding: utf8[7...], as: UTF8.self)
    }

    /// The digest of a finished SHA-256 (its 32 bytes).
    public init(sha256 bytes: some Sequence<UInt8>) {
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        for byte in bytes {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        precondition(hex.count == 64, "a SHA-256 is 32 bytes")
        self.hex = String(decoding: hex, as: UTF8.self)
    }

    /// The digest as written: `sha256:` and the 64 hex digits.
    public var description: String { "sha256:" + hex }

    /// Why `text` is not a digest, as a refusal says it.
    public static func problem(with text: String) -> String {
        "'\(text.prefix(80))' is not an attachment digest: write sha256: and the 64 lowercase hex digits of the bytes' SHA-256"
    }

    /// Reads a digest from its written form; anything else is a decoding error saying why.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let digest = AttachmentDigest(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.problem(with: text)))
        }
        self = digest
    }

    /// Writes the digest in its written form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
