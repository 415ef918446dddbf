import ArgumentParser
import Ferry
import FerryProtocol
import FerryServer
import Foundation
import GRDB

struct ClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "A client store of generic JSON records, synced by the Ferry library.",
        discussion:
            "Each user's records live in DIR/user-<SHA-256 of the user id>.sqlite; every entity is synced with id, data and an optional natural key.",
        subcommands: [
            ClientAddCommand.self, ClientDeleteCommand.self, ClientImportCommand.self, ClientSyncCommand.self,
            ClientWatchCommand.self, ClientStatusCommand.self, ClientInspectQueueCommand.self, ClientListCommand.self, ClientJournalCommand.self,
            ClientDeadLettersCommand.self, ClientAttachCommand.self, ClientFetchCommand.self,
        ]
    )
}

/// `--store DIR --user U`, shared by every client command.
struct StoreOptions: ParsableArguments {
    @Option(help: "Directory holding one database per user.")
    var store: String

    @Option(help: "The user whose store to use.")
    var user: String

    /// The generic records table: every entity in one table, data as a JSON document whose
    /// `photo` and `attachment` fields hold attachments' digests (`ferry client attach`).
    static let records: SyncedTable = {
        var table = SyncedTable.multiEntity(table: "records", naturalKey: "natural_key", layout: .document(column: "data"), space: .column("space"))
        table.attachments = ["photo", "attachment"]
        return table
    }()

    /// Refuses an empty `--user` and a `--store` that is a file; `false` when the directory
    /// does not exist.
    private func checked() throws -> Bool {
        guard !user.isEmpty else { throw CommandFailure("--user must not be empty") }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: store, isDirectory: &isDirectory) else { return false }
        guard isDirectory.boolValue else { throw CommandFailure("--store \(store) is a file; pass the directory that holds the stores") }
        return true
    }

    /// The user's store file as it is, found without creating, migrating or moving anything.
    func existingStore() throws -> URL {
        guard try checked() else { throw CommandFailure("no store for user \(user): --store \(store) does not exist") }
        guard let file = StoreLocation.existingPath(forUser: user, in: URL(fileURLWithPath: store)) else {
            throw CommandFailure("no store for user \(user) in \(store) (looked for \(StoreLocation.fileName(forUser: user)))")
        }
        return file
    }

    func open() throws -> FerryStore {
        if try !checked() {
            do {
                try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
            } catch {
                throw CommandFailure("--store \(store): cannot create the directory: \(error.localizedDescription)")
            }
        }
        do {
            let path = try StoreLocation.path(forUser: user, in: URL(fileURLWithPath: store, isDirectory: true))
            return try FerryStore(path: path.path, schema: Self.schema, tables: [Self.records])
        } catch {
            throw CommandFailure("cannot open the store for \(user) in \(store): \(error)")
        }
    }

    /// The client commands' schema: the `records` table.
    static var schema: DatabaseMigrator {
        var schema = DatabaseMigrator()
        schema.registerMigration("ferry-client-records-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE records (
                        entity TEXT NOT NULL,
                        id TEXT NOT NULL,
                        data TEXT NOT NULL,
                        natural_key TEXT,
                        PRIMARY KEY (entity, id)
                    )
                    """
            )
        }
        schema.registerMigration("ferry-client-records-v2") { db in
            // The space each record lives in (`--space`); NULL for the user's personal space.
            try db.execute(sql: "ALTER TABLE records ADD COLUMN space TEXT")
        }
        return schema
    }
}

/// `--server` as a URL, and `--token` as a token for `user`, checked before anything is sent
/// (commands call it from `validate()`): a `ValidationError` saying which is wrong.
func checkedServer(_ server: String, token: String, user: String) throws -> URL {
    guard let url = URL(string: server), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
        throw ValidationError("--server '\(server)' is not an http(s) URL like http://127.0.0.1:8080")
    }
    guard let subject = TokenAuthority.unverifiedSubject(of: token) else {
        throw ValidationError("--token is not a JWT with a readable sub claim (three base64url parts of JSON)")
    }
    // Byte for byte: "zoë" composed and decomposed are two users.
    guard subject.hasSameBytes(as: user) else {
        throw ValidationError("the token is for user '\(subject)', not '\(user)'; nothing was sent")
    }
    return url
}

/// Checks a `--space` before anything is written or sent.
func validateSpace(_ space: String?) throws {
    if let space, let problem = ProtocolValidation.spaceIDProblem(space) { throw CommandFailure("--space: \(problem)") }
}

/// Checks an entity name and record id before anything is written.
func validateRecord(entity: String, id: String, naturalKey: String?) throws {
    if let problem = ProtocolValidation.entityProblem(entity) { throw CommandFailure("--entity: \(problem)") }
    if let problem = ProtocolValidation.entityIDProblem(id) { throw CommandFailure("--id: \(problem)") }
    if let naturalKey, let problem = ProtocolValidation.naturalKeyProblem(naturalKey) { throw CommandFailure("--natural-key: \(problem)") }
}

/// Parses a JSON object given on the command line or in a file, saying what is wrong if it is not one.
func parseObject(_ text: String, what: String) throws -> JSONObject {
    let value: JSONValue
    do {
        value = try JSONReader.parse(text.utf8)
    } catch {
        throw CommandFailure("\(what) is not JSON the protocol can carry: \(error)")
    }
    guard case .object(let object) = value else {
        throw CommandFailure("\(what) must be a JSON object, for example '{\"value\": 1}'")
    }
    return object
}

/// A record's data as stored and sent, refused if the protocol cannot carry it.
func encodeData(_ object: JSONObject, what: String) throws -> String {
    let encoded = try ProtocolValidation.encode(object)
    if let problem = ProtocolValidation.dataSizeProblem(encoded.count) { throw CommandFailure("\(what): \(problem)") }
    return String(decoding: encoded, as: UTF8.self)
}
