import FerryProtocol
import FerryTestSupport
import Foundation
import GRDB
import Testing

@testable import Ferry

/// The app's own schema (UNIQUE indexes, NOT NULL columns, foreign keys, which GRDB turns
/// on) never wedges a sync: what it refuses is set aside, everything else arrives.
@Suite("The app's schema", .timeLimit(.minutes(2)))
struct AppSchemaTests {
    /// Projects keyed by `code` (a natural key, unique locally) and tasks that reference them.
    static let projects = SyncedTable(table: "projects", naturalKey: "code")
    static let tasks = SyncedTable(table: "tasks")

    static func projectSchema(titleRequired: Bool = false) -> DatabaseMigrator {
        var schema = DatabaseMigrator()
        schema.registerMigration("app-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, code TEXT UNIQUE, title TEXT \(titleRequired ? "NOT NULL" : ""));
                    CREATE TABLE tasks (id TEXT PRIMARY KEY NOT NULL, project TEXT REFERENCES projects (id), title TEXT);
                    """
            )
        }
        return schema
    }

    static func openStore(titleRequired: Bool = false, at path: String = ClientFixture.storePath()) throws -> FerryStore {
        try FerryStore(path: path, schema: projectSchema(titleRequired: titleRequired), tables: [projects, tasks])
    }

    static func rows(_ sql: String, in store: FerryStore) async throws -> [[String?]] {
        try await store.database.read { db in
            try Row.fetchAll(db, sql: sql).map { row in row.databaseValues.map { String.fromDatabaseValue($0) } }
        }
    }

    static func count(_ from: String, in store: FerryStore) async throws -> Int {
        try await store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(from)") ?? 0 }
    }

    static func configuration(pageSize: Int) -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.pullPageSize = pageSize
        return configuration
    }

    @Test(
        "a trigger that refuses with RAISE(FAIL), which keeps what its statement did: the refused record is set aside and leaves no row, no version, and no trigger runs twice"
    )
    func failKeepsNothingOfARefusedRecord() async throws {
        try await TestServer.run { server in
            var schema = DatabaseMigrator()
            schema.registerMigration("app-v1") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, code TEXT UNIQUE, title TEXT);
                        CREATE TABLE audit (what TEXT NOT NULL);
                        CREATE TRIGGER audit_insert AFTER INSERT ON projects BEGIN INSERT INTO audit VALUES ('insert ' || NEW.id); END;
                        CREATE TRIGGER audit_update AFTER UPDATE ON projects BEGIN INSERT INTO audit VALUES ('update ' || NEW.id); END;
                        CREATE TRIGGER refuse_bad AFTER INSERT ON projects WHEN NEW.title = 'bad' BEGIN SELECT RAISE(FAIL, 'the app refuses bad titles'); END;
                        CREATE TRIGGER keep_p2 BEFORE DELETE ON projects WHEN OLD.id = 'p2' BEGIN SELECT RAISE(FAIL, 'the app keeps p2'); END;
                        """
                )
            }
            let store = try FerryStore(path: ClientFixture.storePath(), schema: schema, tables: [Self.projects])
            let client = ClientFixture.client(store: store, server: server)
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: (1...6).map {
                        .upsert(id: Int64($0), entity: "projects", entityID: "p\($0)", data: ["title": .string($0 == 4 ? "bad" : "t\($0)")])
                    }
                ),
                token: token
            )
            var report = try await client.sync()
            #expect(report.pull.setAside == 1)
            #expect(try await Self.rows("SELECT id, title FROM projects ORDER BY id", in: store) == [1, 2, 3, 5, 6].map { ["p\($0)", "t\($0)"] })
            #expect(try await Self.rows("SELECT what FROM audit ORDER BY rowid", in: store) == [1, 2, 3, 5, 6].map { ["insert p\($0)"] })
            #expect(try await Self.rows("SELECT entity_id FROM ferry_versions WHERE entity_id = 'p4'", in: store).isEmpty)
            // A delete the app refuses keeps its row, set aside; the one beside it goes.
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [.delete(id: 7, entity: "projects", entityID: "p1"), .delete(id: 8, entity: "projects", entityID: "p2")]
                ),
                token: token
            )
            report = try await client.sync()
            #expect(try await Self.rows("SELECT id FROM projects ORDER BY id", in: store) == [["p2"], ["p3"], ["p5"], ["p6"]])
            #expect(try await Self.rows("SELECT entity_id FROM ferry_set_aside ORDER BY entity_id", in: store) == [["p2"], ["p4"]])
        }
    }

    @Test("a natural key moved from one record to another, the first edited again: the page is written in an order the UNIQUE index takes")
    func naturalKeyMovedWithinAPage() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            let store = try Self.openStore()
            let client = ClientFixture.client(store: store, server: server)
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [.upsert(id: 1, entity: "projects", entityID: "y", data: ["title": .string("Y")], naturalKey: "K")]
                ),
                token: token
            )
            try await client.sync()
            // y gives K up (deleted, then revived without it) after x took it: x comes first in the page.
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: [
                        .delete(id: 2, entity: "projects", entityID: "y"),
                        .upsert(id: 3, entity: "projects", entityID: "x", data: ["title": .string("X")], naturalKey: "K"),
                        .upsert(id: 4, entity: "projects", entityID: "y", data: ["title": .string("Y again")]),
                    ]
                ),
                token: token
            )
            let report = try await client.sync()
            #expect(report.pull.setAside == 0)
            #expect(try await Self.rows("SELECT id, code, title FROM projects ORDER BY id", in: store) == [["x", "K", "X"], ["y", nil, "Y again"]])
        }
    }

    @Test("a pulled record a NOT NULL column refuses is set aside with why; the rest arrive, later pulls run, and a migration lets it in")
    func notNullRefusal() async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            _ = try await server.pushOK(
                PushRequest(
                    clientID: "web",
                    mutations: (1...30).map { index in
                        .upsert(id: Int64(index), entity: "projects", entityID: "p\(index)", data: index == 7 ? [:] : ["title": .string("P\(index)")])
                    }
                ),
                token: token
            )
            let path = ClientFixture.storePath()
            let store = try Self.openStore(titleRequired: true, at: path)
            let client = ClientFixture.client(store: store, server: server, configuration: Self.configuration(pageSize: 10))
            let first = try await client.sync()
            #expect(first.pull.setAside == 1)
            #expect(try await Self.count("projects", in: store) == 29)
            let journal = try await client.journal.events().filter { $0.kind == .pullSetAside }
            #expect(journal.count == 1)
            #expect(journal.first?.message.contains("projects/p7") == true)
            #expect(journal.first?.message.contains("NOT NULL constraint failed: projects.title") == true, "\(journal)")
            let snapshot = try await client.queueSnapshot()
            #expect(snapshot.setAside.map(\.entityID) == ["p7"])
            #expect(snapshot.explanation.joined().contains("projects/p7: the app's schema refused it"), "\(snapshot.explanation)")

            // Later pulls run, and the record still waits.
            _ = try await server.pushOK(
                PushRequest(clientID: "web", mutations: [.upsert(id: 31, entity: "projects", entityID: "p31", data: ["title": .string("P31")])]),
                token: token
            )
            #expect(try await client.sync().pull.setAside == 1)
            #expect(try await Self.count("projects", in: store) == 30)
            try await store.close()

            // The app's next version makes the title optional: the next sync writes the record.
            var schema = Self.projectSchema(titleRequired: true)
            schema.registerMigration("app-v2") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE projects_v2 (id TEXT PRIMARY KEY NOT NULL, code TEXT UNIQUE, title TEXT);
                        INSERT INTO projects_v2 SELECT id, code, title FROM projects;
                        DROP TABLE projects;
                        ALTER TABLE projects_v2 RENAME TO projects;
                        """
                )
            }
            let migrated = try FerryStore(path: path, schema: schema, tables: [Self.projects, Self.tasks])
            let after = try await ClientFixture.client(store: migrated, server: server).sync()
            #expect(after.pull.setAside == 0)
            #expect(after.pull.applied == 1)
            #expect(try await Self.count("projects", in: migrated) == 31)
            #expect(try await QueueSnapshot.read(from: migrated).setAside.isEmpty)
        }
    }

    @Test("a fresh device pulls tasks before their project (edited after they were made), in one page and across pages", arguments: [100, 1])
    func childrenBeforeTheirParent(pageSize: Int) async throws {
        try await TestServer.run { server in
            let token = try await TestServer.token(for: "alice")
            var mutations: [Mutation] = [.upsert(id: 1, entity: "projects", entityID: "p", data: ["title": .string("Plan")])]
            for index in 0..<5 {
                mutations.append(
                    .upsert(
                        id: Int64(2 + index),
                        entity: "tasks",
                        entityID: "t\(index)",
                        data: ["project": .string("p"), "title": .string("T\(index)")]
                    )
                )
            }
            mutations.append(.upsert(id: 10, entity: "projects", entityID: "p", data: ["title": .string("Plan, edited")]))
            _ = try await server.pushOK(PushRequest(clientID: "web", mutations: mutations), token: token)

            let store = try Self.openStore()
            let report = try await ClientFixture.client(store: store, server: server, configuration: Self.configuration(pageSize: pageSize)).sync()
            #expect(report.pull.setAside == 0)
            #expect(try await Self.count("tasks WHERE project = 'p'", in: store) == 5)
            #expect(try await Self.rows("SELECT title FROM projects", in: store) == [["Plan, edited"]])
            #expect(try await Self.count("ferry_set_aside", in: store) == 0)
        }
    }

    @Test("a project merged by natural key into another device's takes its tasks with it: foreign keys hold, the tasks reach the server re-pointed")
    func mergedParentTakesItsChildren() async throws {
        try await TestServer.run { server in
            let phone = try Self.openStore()
            let laptop = try Self.openStore()
            try await laptop.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-laptop', 'K', 'Laptop')")
            }
            try await ClientFixture.client(store: laptop, server: server).sync()
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-phone', 'K', 'Phone')")
                for index in 0..<3 {
                    try db.execute(sql: "INSERT INTO tasks (id, project, title) VALUES (?, 'from-phone', 'task')", arguments: ["t\(index)"])
                }
            }
            let phoneClient = ClientFixture.client(store: phone, server: server)
            let report = try await phoneClient.sync()
            #expect(report.upload.merged == 1)
            #expect(await phoneClient.status.pending == 0)
            #expect(try await Self.rows("SELECT id FROM projects", in: phone) == [["from-laptop"]])
            #expect(try await Self.rows("SELECT DISTINCT project FROM tasks", in: phone) == [["from-laptop"]])
            #expect(try await Self.count("pragma_foreign_key_check", in: phone) == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            for index in 0..<3 { #expect(remote["tasks/t\(index)"]?.data?["project"] == .string("from-laptop")) }
            try await ClientFixture.client(store: laptop, server: server).sync()
            #expect(try await Self.rows("SELECT DISTINCT project FROM tasks", in: laptop) == [["from-laptop"]])
        }
    }

    @Test("a project merged into one this device pulled, with ON DELETE CASCADE: the pulled project's tasks stay, the merged one's follow it")
    func mergeIntoPulledParentKeepsItsChildren() async throws {
        try await TestServer.run { server in
            var schema = DatabaseMigrator()
            schema.registerMigration("app-v1") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, code TEXT, title TEXT);
                        CREATE TABLE tasks (id TEXT PRIMARY KEY NOT NULL, project TEXT REFERENCES projects (id) ON DELETE CASCADE, title TEXT);
                        """
                )
            }
            let open = { try FerryStore(path: ClientFixture.storePath(), schema: schema, tables: [Self.projects, Self.tasks]) }
            let laptop = try open()
            let phone = try open()
            try await laptop.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-laptop', 'K', 'Laptop')")
                try db.execute(sql: "INSERT INTO tasks (id, project, title) VALUES ('lt', 'from-laptop', 'laptop task')")
            }
            try await ClientFixture.client(store: laptop, server: server).sync()
            let phoneClient = ClientFixture.client(store: phone, server: server)
            try await phoneClient.sync()  // the phone pulls the laptop's project and task
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-phone', 'K', 'Phone')")
                try db.execute(sql: "INSERT INTO tasks (id, project, title) VALUES ('pt', 'from-phone', 'phone task')")
            }
            #expect(try await phoneClient.sync().upload.merged == 1)
            #expect(try await Self.rows("SELECT id, title FROM projects", in: phone) == [["from-laptop", "Phone"]])
            #expect(try await Self.rows("SELECT id, project FROM tasks ORDER BY id", in: phone) == [["lt", "from-laptop"], ["pt", "from-laptop"]])
            #expect(try await Self.count("pragma_foreign_key_check", in: phone) == 0)
            #expect(await phoneClient.status.pending == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote["tasks/lt"]?.op == .upsert && remote["tasks/pt"]?.data?["project"] == .string("from-laptop"))
        }
    }

    @Test("a project merged into one this device deleted since: its tasks go with it, deleted everywhere, and nothing wedges")
    func mergeIntoDeletedParent() async throws {
        try await TestServer.run { server in
            let laptop = try Self.openStore(at: ClientFixture.storePath())
            var schema = DatabaseMigrator()
            schema.registerMigration("app-v1") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE projects (id TEXT PRIMARY KEY NOT NULL, code TEXT, title TEXT);
                        CREATE TABLE tasks (id TEXT PRIMARY KEY NOT NULL, project TEXT REFERENCES projects (id), title TEXT);
                        """
                )
            }
            let phone = try FerryStore(path: ClientFixture.storePath(), schema: schema, tables: [Self.projects, Self.tasks])
            try await laptop.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-laptop', 'K', 'Laptop')")
            }
            try await ClientFixture.client(store: laptop, server: server).sync()
            let phoneClient = ClientFixture.client(store: phone, server: server)
            try await phoneClient.sync()
            try await phone.database.write { db in
                try db.execute(sql: "INSERT INTO projects (id, code, title) VALUES ('from-phone', 'K', 'Phone')")
                try db.execute(sql: "INSERT INTO tasks (id, project, title) VALUES ('pt', 'from-phone', 'phone task')")
                try db.execute(sql: "DELETE FROM projects WHERE id = 'from-laptop'")  // after the change the server will merge
            }
            try await phoneClient.sync()
            try await phoneClient.sync()
            #expect(await phoneClient.status.pending == 0)
            #expect(try await Self.count("projects", in: phone) == 0)
            #expect(try await Self.count("tasks", in: phone) == 0)
            #expect(try await Self.count("pragma_foreign_key_check", in: phone) == 0)
            let remote = try await server.pullAll(token: try await TestServer.token(for: "alice"))
            #expect(remote.values.filter { $0.op == .upsert }.map(\.entityID).isEmpty, "\(remote)")
        }
    }
}
