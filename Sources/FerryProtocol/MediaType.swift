import Foundation

/// A media type as an attachment carries it (PROTOCOL.md, "Attachments"): `type/subtype`, each
/// of RFC 9110's token characters, lower case, at most 127 bytes, without parameters.
public enum MediaType {
    /// `text` without its parameters, trimmed and lower-cased (`Image/JPEG; q=1` is `image/jpeg`).
    public static func normalized(_ text: String) -> String {
        String(text.split(separator: ";", omittingEmptySubsequences: false).first ?? "").trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// Whether `text`, normalized, is a media type.
    public static func isValid(_ text: String) -> Bool {
        let type = normalized(text)
        let parts = type.split(separator: "/", omittingEmptySubsequences: false)
        let token = { (part: Substring) in
            !part.isEmpty && part.utf8.allSatisfy { (48...57).contains($0) || (97...122).contains($0) || "!#$&^_.+-".utf8.contains($0) }
        }
        return type.utf8.count <= 127 && parts.count == 2 && token(parts[0]) && token(parts[1])
    }
}
