import PostgresNIO

/// Reads a row's columns in order, each as its own concrete type. The optimizer specializes each
/// read; a tuple decode of many columns (`row.decode((A, B, …).self)`) resolves generic metadata
/// for every column of every row instead, which `perf` found to be 40% of the server's time in a
/// fresh download of 100,000 records from PostgreSQL.
struct ColumnReader {
    private var cells: PostgresRow.Iterator

    init(_ row: PostgresRow) {
        cells = row.makeIterator()
    }

    /// The next column as `T` (an optional for a column that may be `NULL`).
    mutating func next<T: PostgresDecodable>(_: T.Type = T.self, file: String = #fileID, line: Int = #line) throws -> T {
        guard let cell = cells.next() else { throw MissingColumn() }
        return try cell.decode(T.self, context: .default, file: file, line: line)  // an error names the reader's caller
    }

    /// A statement gave fewer columns than its reader reads: a mistake in Ferry, never the data's.
    struct MissingColumn: Error, CustomStringConvertible {
        var description: String { "a row has fewer columns than its statement names" }
    }
}
