/// Equality of identifiers as SQLite and the wire see them: the same UTF-8 bytes.
///
/// Swift's `==` on `String` also equates canonically equivalent text ("é" as one scalar and
/// "e" plus a combining accent), which SQLite keeps as two different keys; record ids and
/// natural keys held in Swift sets and dictionaries must not be merged that way.
extension String {
    package func hasSameBytes(as other: String) -> Bool {
        // Native strings compare their buffers at once; the byte-by-byte walk of `elementsEqual`
        // was a tenth of a push's planning (dictionary lookups by record and natural key).
        let compared = utf8.withContiguousStorageIfAvailable { mine in
            other.utf8.withContiguousStorageIfAvailable { theirs in mine.elementsEqual(theirs) }
        }
        return (compared ?? nil) ?? utf8.elementsEqual(other.utf8)
    }

    package func hashBytes(into hasher: inout Hasher) {
        let hashed: Void? = utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in utf8 { hasher.combine(byte) }
        }
        hasher.combine(utf8.count)  // keeps ("ab", "c") apart from ("a", "bc")
    }
}

/// A string as a dictionary key that equals another only when their UTF-8 bytes do: user ids
/// that differ only in Unicode normalization ("zoë" composed and decomposed) are two users to
/// the database, so they are two to every table kept in memory too (quotas, queues).
package struct ExactKey: Hashable, Sendable {
    package let text: String

    package init(_ text: String) { self.text = text }

    package static func == (a: Self, b: Self) -> Bool { a.text.hasSameBytes(as: b.text) }

    package func hash(into hasher: inout Hasher) { text.hashBytes(into: &hasher) }
}

extension String? {
    /// Whether both are `nil`, or both hold the same bytes (`String.hasSameBytes(as:)`).
    package func hasSameBytes(as other: String?) -> Bool {
        switch (self, other) {
        case (nil, nil): true
        case (let a?, let b?): a.hasSameBytes(as: b)
        default: false
        }
    }
}
