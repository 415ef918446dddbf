import GRDB

/// The `VALUES` rows of a multi-row statement, padded with rows of NULLs to one of a few
/// sizes.
///
/// Parsing a statement of hundreds of rows costs about as much as running it, so these
/// statements come from GRDB's statement cache; padding keeps the cache to a few dozen
/// shapes (powers of two up to 64 rows, then multiples of 64) instead of one per batch
/// size. Statements drop the padding rows: a NULL never matches in a join or an `IN`,
/// and inserts filter them out.
struct ValuesList {
    let rows: Int
    let columns: Int
    let paddedRows: Int

    init(rows: Int, columns: Int) {
        self.rows = rows
        self.columns = columns
        paddedRows = rows <= 64 ? max(1, 1 << (Int.bitWidth - (rows - 1).leadingZeroBitCount)) : (rows + 63) / 64 * 64
    }

    /// `(?, ?), (?, ?), …` for the padded row count.
    var sql: String {
        let row = "(" + Array(repeating: "?", count: columns).joined(separator: ", ") + ")"
        return Array(repeating: row, count: paddedRows).joined(separator: ", ")
    }

    /// `values` (rows × columns of them, row by row) followed by the padding NULLs.
    func arguments(_ values: [(any DatabaseValueConvertible)?]) -> StatementArguments {
        var all = values
        assert(all.count == rows * columns, "ValuesList: \(all.count) values for \(rows) rows of \(columns)")
        all += repeatElement(nil, count: (paddedRows - rows) * columns)
        return StatementArguments(all)
    }
}
