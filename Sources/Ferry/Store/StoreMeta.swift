import FerryProtocol
import Foundation
import GRDB

/// The one home of `ferry_meta`'s SQL, the store's one row of facts about itself: the client id
/// its changes go out under and the highest id sent under it, the pull's cursor and whether a
/// pull from scratch is under way, when it last synced, and whether capture is on.
enum StoreMeta {
    /// SQL true while capture is on: the capture triggers' `WHEN`.
    static let capturingSQL = "(SELECT capturing FROM ferry_meta)"

    /// The client id changes go out under now, and the highest mutation id sent under it.
    static func sender(_ db: Database) throws -> (clientID: String?, highestSent: Int64) {
        let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT client_id, highest_sent FROM ferry_meta"))
        return (row?[0], row?[1] ?? 0)
    }

    static func clientID(_ db: Database) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT client_id FROM ferry_meta"))
    }

    static func setHighestSent(_ id: Int64, db: Database) throws {
        try db.cachedStatement(sql: "UPDATE ferry_meta SET highest_sent = ?").execute(arguments: [id])
    }

    /// A new client id, under which nothing was sent yet.
    static func renewClientID(_ clientID: String, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET client_id = ?, highest_sent = 0", arguments: [clientID])
    }

    /// The pull's cursor (`nil`: from the start) and whether a pull from scratch is under way.
    static func pullPosition(_ db: Database) throws -> (cursor: String?, fromScratch: Bool) {
        (try String.fetchOne(db, sql: "SELECT cursor FROM ferry_meta"), try Bool.fetchOne(db, sql: "SELECT scratch FROM ferry_meta") ?? false)
    }

    static func setCursor(_ cursor: String?, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET cursor = ?", arguments: [cursor])
    }

    /// Pulls again from the start; `sweeps`: the store holds records a pull from scratch must
    /// check against what it brings.
    static func beginFromScratch(sweeps: Bool, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET cursor = NULL, scratch = ?", arguments: [sweeps])
    }

    /// The protocol version that left out pulled changes it did not know (a later server's),
    /// `nil` when none was: the cursor moved past them, so a later version pulls from scratch.
    static func leftOutBy(_ db: Database) throws -> ProtocolVersion? {
        try String.fetchOne(db, sql: "SELECT left_out_by FROM ferry_meta").flatMap { ProtocolVersion($0) }
    }

    /// Notes, in the transaction that moves the cursor past them, that `version` left out changes.
    static func setLeftOut(by version: ProtocolVersion?, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET left_out_by = ?", arguments: [version?.description])
    }

    /// The pull from scratch swept what it did not bring.
    static func endFromScratch(_ db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET scratch = 0")
    }

    static func lastSyncedAt(_ db: Database) throws -> Date? {
        try Double.fetchOne(db, sql: "SELECT last_synced_at FROM ferry_meta").map(Date.init(timeIntervalSince1970:))
    }

    static func setLastSynced(_ date: Date, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET last_synced_at = ?", arguments: [date.timeIntervalSince1970])
    }

    /// Switches capture off or on in `db`'s transaction.
    static func setCapturing(_ on: Bool, db: Database) throws {
        try db.execute(sql: "UPDATE ferry_meta SET capturing = ?", arguments: [on])
    }
}
