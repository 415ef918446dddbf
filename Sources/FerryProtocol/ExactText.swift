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
