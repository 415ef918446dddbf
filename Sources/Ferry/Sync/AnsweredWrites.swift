import GRDB

/// The ids of this store's own writes that the server answered and a pull has not yet passed
/// (`ferry_answered`): the next pull names them, and the server leaves them out (`Puller`).
enum AnsweredWrites {
    /// The ids, in order.
    static func all(_ db: Database) throws -> [Int64] {
        try Int64.fetchAll(db, sql: "SELECT id FROM ferry_answered ORDER BY id")
    }

    /// Notes the mutation ids a push answered (only these, never a ceiling: a copy of this store
    /// elsewhere may write under the same client id with ids in between).
    static func note(_ ids: [Int64], db: Database) throws {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO ferry_answered (id) SELECT value FROM json_each(?)")
            .execute(arguments: [OutboxTable.idList(ids)])
    }

    /// Forgets the ids up to `last`: a pull caught up past them.
    static func forget(through last: Int64, db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_answered WHERE id <= ?", arguments: [last])
    }

    /// Forgets every id: they were another client id's.
    static func forgetAll(_ db: Database) throws {
        try db.execute(sql: "DELETE FROM ferry_answered")
    }
}
