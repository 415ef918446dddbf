/// Equality of identifiers as SQLite and the wire see them: the same UTF-8 bytes.
///
/// Swift's `==` on `String` also equates canonically equivalent text ("é" as one scalar and
/// "e" plus a combining accent), which SQLite keeps as two different keys; record ids and
/// natural keys held in Swift sets and dictionaries must not be merged that way.
extension String {
    public func hasSameBytes(as other: String) -> Bool {
        utf8.elementsEqual(other.utf8)
    }

    public func hashBytes(into hasher: inout Hasher) {
        let hashed: Void? = utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in utf8 { hasher.combine(byte) }
        }
        hasher.combine(utf8.count)  // keeps ("ab", "c") apart from ("a", "bc")
    }
}
