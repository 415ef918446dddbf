import ArgumentParser
import Ferry
import FerryProtocol
import Foundation
import GRDB

struct ClientAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a record, or replace it if the id exists (an edit).")

    @OptionGroup var options: StoreOptions
    @Option(help: "Entity name, like events.") var entity: String
    @Option(help: "Record id.") var id: String
    @Option(help: "The record as a JSON object.") var data: String
    @Option(help: "Natural key, for server-side de-duplication.") var naturalKey: String?
    @Option(help: "The space the record lives in; none for the user's personal space.") var space: String?

    func run() async throws {
        try validateRecord(entity: entity, id: id, naturalKey: naturalKey)
        try validateSpace(space)
        let encoded = try encodeData(try parseObject(data, what: "--data"), what: "--data")
        let store = try options.open()
        do {
            try await store.database.write { [entity, id, naturalKey, space] db in
                try db.execute(
                    sql: """
                        INSERT INTO records (entity, id, data, natural_key, space) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (entity, id) DO UPDATE SET data = excluded.data, natural_key = excluded.natural_key, space = excluded.space
                        """,
                    arguments: [entity, id, encoded, naturalKey, space]
                )
            }
        } catch let error as DatabaseError {
            throw CommandFailure("\(entity)/\(id) was not saved: \(error.message ?? "\(error)")")
        }
        printNow("saved \(entity)/\(id)" + (space.map { " in space \($0)" } ?? ""))
    }
}

struct ClientDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a record.")

    @OptionGroup var options: StoreOptions
    @Option(help: "Entity name.") var entity: String
    @Option(help: "Record id.") var id: String
    @Option(help: "The space the record must be in; none for the personal space.") var space: String?

    func run() async throws {
        try validateRecord(entity: entity, id: id, naturalKey: nil)
        try validateSpace(space)
        let store = try options.open()
        let deleted: Int
        do {
            deleted = try await store.database.write { [entity, id, space] db in
                try db.execute(sql: "DELETE FROM records WHERE entity = ? AND id = ? AND space IS ?", arguments: [entity, id, space])
                return db.changesCount
            }
        } catch let error as DatabaseError {
            throw CommandFailure("\(entity)/\(id) was not deleted: \(error.message ?? "\(error)")")
        }
        guard deleted > 0 else {
            throw CommandFailure("no record \(entity)/\(id) in \(space.map { "space \($0)" } ?? "the personal space") of \(options.user)")
        }
        printNow("deleted \(entity)/\(id)")
    }
}

struct ClientImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import records from JSON lines, all or nothing.",
        discussion: #"Each line: {"entityID": "e-1", "data": {...}, "naturalKey": "optional"}"#
    )

    @OptionGroup var options: StoreOptions
    @Option(help: "Entity name for every record.") var entity: String
    @Option(help: "A .jsonl file (a regular file).") var file: String
    @Option(help: "The space every record lives in; none for the personal space.") var space: String?

    func run() async throws {
        if let problem = ProtocolValidation.entityProblem(entity) { throw CommandFailure("--entity: \(problem)") }
        try validateSpace(space)
        let type = (try? FileManager.default.attributesOfItem(atPath: file))?[.type] as? FileAttributeType
        // A regular file only: a pipe or a device would hold the store's write lock while it waits or never ends.
        guard type == .typeRegular, FileManager.default.isReadableFile(atPath: file) else {
            let why =
                type == nil
                ? "cannot read it"
                : type == .typeDirectory ? "is a directory" : "is not a regular file; save it to a file first"
            throw CommandFailure("--file \(file): \(why)")
        }
        // Every line is checked as it is written, all in one transaction: a line that is not a
        // record rolls everything back. The file is read a megabyte at a time, so a million
        // lines import in the same memory as a thousand.
        let store = try options.open()
        let count: Int
        do {
            count = try await store.database.write { [entity, file, space] db in
                let statement = try db.makeStatement(
                    sql: """
                        INSERT INTO records (entity, id, data, natural_key, space) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (entity, id) DO UPDATE SET data = excluded.data, natural_key = excluded.natural_key, space = excluded.space
                        """
                )
                var written = 0
                try Self.forEachRecord(in: file, entity: entity) { row in
                    try statement.execute(arguments: [entity, row.id, row.data, row.naturalKey, space])
                    written += 1
                }
                return written
            }
        } catch let error as DatabaseError {
            throw CommandFailure("nothing was imported: \(error.message ?? "\(error)")")
        }
        printNow("imported \(count.formatted()) records into \(entity)")
    }

    /// Calls `body` with the record of each line that is not blank, reading a megabyte at a time.
    private static func forEachRecord(
        in file: String,
        entity: String,
        _ body: ((id: String, data: String, naturalKey: String?)) throws -> Void
    ) throws {
        guard let handle = FileHandle(forReadingAtPath: file) else { throw CommandFailure("--file \(file): cannot read it") }
        defer { try? handle.close() }
        var number = 0
        // Bytes read and not yet split into lines; `scanned` of them hold no newline.
        var pending: [UInt8] = []
        var scanned = 0
        func lines() throws {
            var start = 0
            while let end = pending[(start + scanned)...].firstIndex(of: UInt8(ascii: "\n")) {
                try line(pending[start..<end])
                start = end + 1
                scanned = 0
            }
            pending.removeFirst(start)
            scanned = pending.count
        }
        func line(_ bytes: ArraySlice<UInt8>) throws {
            number += 1
            if bytes.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\t") }) { return }
            do {
                let fields = try parseObject(String(decoding: bytes, as: UTF8.self), what: "the line")
                guard case .string(let entityID)? = fields["entityID"], case .object(let data)? = fields["data"] else {
                    throw CommandFailure(#"expected {"entityID": string, "data": object, "naturalKey": optional string}"#)
                }
                var naturalKey: String?
                switch fields["naturalKey"] {
                case nil, .null?: break
                case .string(let key)?: naturalKey = key
                default: throw CommandFailure("naturalKey must be a string")
                }
                try validateRecord(entity: entity, id: entityID, naturalKey: naturalKey)
                try body((entityID, try encodeData(data, what: "data"), naturalKey))
            } catch {
                throw CommandFailure("\(file):\(number): \(error); nothing was imported")
            }
        }
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            pending.append(contentsOf: chunk)
            try lines()
        }
        if !pending.isEmpty { try line(pending[...]) }
    }
}
