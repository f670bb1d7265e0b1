import Foundation
import Logging
@testable import PostgresBackend
import ReconcilerStore
import Testing
import TestSupport
@testable import SQLiteBackend

/// The stores every conformance test runs against.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    var testDescription: String { rawValue }
}

/// A fresh, empty store of one backend, and what a test needs around it. The store is reached through a
/// ``RecordingStore``, which notes the role functions the suite calls.
struct StoreUnderTest: Sendable {
    let backend: Backend
    let store: any ReconcilerStore
    /// Another handle on the same state, as a second daemon (or the command line) would open it.
    let openAnother: @Sendable () async throws -> any ReconcilerStore
    /// Drops `table` behind the store's back, so that the next statement touching it fails.
    let dropTable: @Sendable (String) async throws -> Void
    /// Takes the schema back to before the migration that made the settlement tables, behind the store's back: runs
    /// `undo` (SQL that removes what that migration made) and lowers the recorded version, so that the next handle
    /// opened (``openAnother``) applies it (and any after it) again, to the rows written meanwhile: its backfill, tested.
    let rewindSettlementMigration: @Sendable (_ undo: String) async throws -> Void

    /// Runs `body` with a new store; closes every handle afterwards.
    static func with<T>(_ backend: Backend, _ body: (StoreUnderTest) async throws -> T) async throws -> T {
        switch backend {
        case .sqlite:
            let directory = NSTemporaryDirectory() + "klarna-reconciler-conformance-" + UUID().uuidString.prefix(8)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let path = directory + "/state.sqlite"
            let store = try SQLiteStore(path: path)
            return try await body(
                StoreUnderTest(
                    backend: backend, store: RecordingStore(base: store, backend: backend),
                    openAnother: { RecordingStore(base: try SQLiteStore(path: path), backend: backend) },
                    dropTable: { table in try SQLiteConnection(path: path, readOnly: false, busyTimeout: .seconds(5)).execute("DROP TABLE \(table)")
                    },
                    rewindSettlementMigration: { undo in
                        try SQLiteConnection(path: path, readOnly: false, busyTimeout: .seconds(5))
                            .execute("\(Schema.beforeAccounts(time: "REAL")); \(undo); PRAGMA user_version = \(Migrations.settlementStep - 1)")
                    }))
        case .postgres:
            let server = try await PostgresServer.shared()
            let database = try await server.createDatabase()
            let location = try PostgresLocation(url: server.url(database))
            let logger = Logger(label: "conformance.postgres")
            let opened = OpenedStores()
            @Sendable func open() async throws -> PostgresStore {
                let store = try await PostgresStore.open(location, password: server.password, logger: logger)
                opened.add(store)
                return store
            }
            defer { opened.closeAll() }
            let store = try await open()
            return try await body(
                StoreUnderTest(
                    backend: backend, store: RecordingStore(base: store, backend: backend),
                    openAnother: { RecordingStore(base: try await open(), backend: backend) },
                    dropTable: { table in try await server.psql("DROP TABLE \(table)", database: database) },
                    rewindSettlementMigration: { undo in
                        // Step 6 (heartbeat leases) undone too: it runs again after the settlement step.
                        try await server.psql(
                            """
                            \(Schema.beforeAccounts(time: "timestamptz"));
                            \(undo);
                            ALTER TABLE daemons DROP COLUMN leased_until, DROP COLUMN holds;
                            DROP INDEX work_leases_free;
                            ALTER TABLE work_leases DROP COLUMN woken, ADD COLUMN locked_until timestamptz NOT NULL DEFAULT '-infinity';
                            CREATE INDEX work_leases_until ON work_leases(locked_until, since);
                            DROP TRIGGER wakeups_work ON wakeups;
                            DROP FUNCTION klarna_work_woken();
                            CREATE TRIGGER wakeups_work AFTER INSERT ON wakeups FOR EACH ROW EXECUTE FUNCTION klarna_work_arrived('', 'work_key');
                            DELETE FROM schema_migrations WHERE version >= \(PostgresSchema.settlementStep)
                            """, database: database)
                    }))
        }
    }
}

/// The PostgreSQL stores a test opened, closed when it ends.
final class OpenedStores: @unchecked Sendable {
    private let lock = NSLock()
    private var stores: [PostgresStore] = []

    func add(_ store: PostgresStore) { lock.withLock { stores.append(store) } }
    func closeAll() { lock.withLock { stores.forEach { $0.close() } } }
}
