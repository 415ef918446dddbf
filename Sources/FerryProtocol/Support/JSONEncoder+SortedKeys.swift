import Foundation

extension JSONEncoder {
    /// Compact JSON with sorted keys and unescaped slashes: how Ferry writes every JSON value
    /// that `JSONTextWriter` does not (error envelopes, conflicts' records, journal lines, CLI output).
    package static func sortedKeys() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
