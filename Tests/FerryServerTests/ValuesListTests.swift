import GRDB
import Testing

@testable import FerryServer

/// Multi-row statements come in a few padded shapes, so GRDB's statement cache holds a few
/// dozen statements instead of one per batch size.
@Suite("Values list")
struct ValuesListTests {
    @Test("rows are padded to a power of two up to 64, then to a multiple of 64")
    func padding() {
        let expected: [(rows: Int, padded: Int)] = [
            (1, 1), (2, 2), (3, 4), (5, 8), (33, 64), (64, 64), (65, 128), (128, 128), (129, 192), (1000, 1024),
        ]
        for (rows, padded) in expected {
            #expect(ValuesList(rows: rows, columns: 3).paddedRows == padded, "\(rows) rows")
        }
        let shapes = Set((1...1000).map { ValuesList(rows: $0, columns: 2).paddedRows })
        #expect(shapes.count == 7 + 15, "shapes: \(shapes.sorted())")
    }

    @Test("the SQL has a placeholder for every padded value, and the padding rows are NULLs that a statement can drop")
    func sqlAndArguments() throws {
        let list = ValuesList(rows: 3, columns: 2)
        #expect(list.sql == "(?, ?), (?, ?), (?, ?), (?, ?)")
        let arguments = list.arguments(["a", 1, "b", 2, "c", 3])
        let queue = try DatabaseQueue()
        let rows = try queue.read { db in
            try Row.fetchAll(db, sql: "SELECT column1, column2 FROM (VALUES \(list.sql)) WHERE column1 IS NOT NULL", arguments: arguments)
        }
        #expect(rows.map { $0[0] as String } == ["a", "b", "c"])
        #expect(rows.map { $0[1] as Int } == [1, 2, 3])
        let all = try queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM (VALUES \(list.sql))", arguments: arguments) }
        #expect(all == 4)
    }
}
