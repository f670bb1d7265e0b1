import Foundation
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
@testable import SQLiteBackend
import Testing
import TestSupport

/// What only the PostgreSQL store does: `store.url`, migrations shared by daemons starting together, and the words
/// an operator gets when the server cannot be used.
@Suite("PostgreSQL store")
struct PostgresStoreTests {
    let logger = Logger(label: "test.postgres")

    @Test("store.url: TCP with sslmode, a socket directory as the host, and each mistake named")
    func location() throws {
        let tcp = try PostgresLocation(url: "postgres://reconciler@db.internal:6432/payments?sslmode=require")
        #expect(tcp == PostgresLocation(endpoint: .tcp(host: "db.internal", port: 6432), user: "reconciler", database: "payments", tls: .require))
        #expect(try PostgresLocation(url: "postgresql://u@h/d").endpoint == .tcp(host: "h", port: 5432))
        #expect(try PostgresLocation(url: "postgres://u@h/d").tls == .prefer)
        let socket = try PostgresLocation(url: "postgres://u@%2Frun%2Fpostgresql/d")
        #expect(socket.endpoint == .unixSocket(directory: "/run/postgresql", port: 5432))
        #expect(try PostgresLocation(url: socket.description) == socket)
        #expect(try PostgresLocation(url: "postgres://u@/d?host=/var/run/pg").endpoint == .unixSocket(directory: "/var/run/pg", port: 5432))
        #expect(try PostgresLocation(url: tcp.description) == tcp)

        func problem(_ url: String) -> String {
            do {
                _ = try PostgresLocation(url: url)
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        #expect(problem("postgres://u:secret@h/d").contains("store-password"))
        #expect(!problem("postgres://u:secret@h/d").contains("secret@"), "the password was echoed")
        #expect(problem("mysql://u@h/d").contains("only postgres://"))
        #expect(problem("postgres://h/d").contains("no user"))
        #expect(problem("postgres://u@h/").contains("no database"))
        #expect(try PostgresLocation(url: "postgres://u@h/d?sslmode=verify-full").tls == .verifyFull)
        #expect(problem("postgres://u@h/d?sslmode=verify-ca").contains("sslmode=verify-ca"))
        #expect(problem("postgres://u@h/d?application_name=x").contains("application_name"))
    }

    @Test("Daemons starting together migrate once; each finds the latest schema")
    func concurrentMigrations() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let location = try PostgresLocation(url: server.url(database))
        let stores = try await withThrowingTaskGroup(of: PostgresStore.self) { group in
            for _ in 0..<5 { group.addTask { try await PostgresStore.open(location, password: server.password, logger: logger) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        defer { stores.forEach { $0.close() } }
        #expect(try await server.psql("SELECT count(*), count(DISTINCT version) FROM schema_migrations", database: database) == "\(PostgresStore.schemaVersion)|\(PostgresStore.schemaVersion)")
        for store in stores { try await store.probeWrites() }
    }

    @Test("A schema newer than this binary is refused with its version, not touched")
    func newerSchema() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        let location = try PostgresLocation(url: server.url(database))
        try await PostgresStore.open(location, password: server.password, logger: logger).close()
        try await server.psql("INSERT INTO schema_migrations (version) VALUES (99)", database: database)
        await #expect {
            try await PostgresStore.open(location, password: server.password, logger: logger)
        } throws: { error in
            (error as? PostgresProblem)?.kind == .schemaTooNew
                && "\(error)".contains("version \(PostgresStore.schemaVersion + 1), newer than this binary (\(PostgresStore.schemaVersion))")
        }
        #expect(try await server.psql("SELECT count(*) FROM schema_migrations", database: database) == "\(PostgresStore.schemaVersion + 1)")
    }

    @Test("An operator's command does not migrate: an empty database is refused until the daemon has started once")
    func commandsDoNotMigrate() async throws {
        let server = try await PostgresServer.shared()
        let location = try PostgresLocation(url: server.url(try await server.createDatabase()))
        await #expect {
            try await PostgresStore.open(location, password: server.password, migrate: false, logger: logger)
        } throws: { error in
            (error as? PostgresProblem)?.kind == .schemaTooOld && "\(error)".contains("start the daemon once")
        }
    }

    @Test("A wrong password, an unknown database and an unreachable server are each named")
    func problemsNamed() async throws {
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        await #expect {
            try await PostgresStore.open(try PostgresLocation(url: server.url(database)), password: "wrong", logger: logger)
        } throws: { error in
            (error as? PostgresProblem)?.kind == .authenticationFailed && !"\(error)".contains("wrong")
        }
        await #expect {
            try await PostgresStore.open(try PostgresLocation(url: server.url("no_such_database")), password: server.password, logger: logger)
        } throws: { error in
            (error as? PostgresProblem)?.kind == .noSuchDatabase && "\(error)".contains("no_such_database")
        }
        let nowhere = PostgresLocation(endpoint: .tcp(host: "127.0.0.1", port: try freeLoopbackPort()), user: "u", database: "d", tls: .disable)
        await #expect {
            try await PostgresStore.open(nowhere, password: nil, logger: logger)
        } throws: { error in
            (error as? PostgresProblem)?.kind == .unreachable && "\(error)".contains("cannot reach PostgreSQL")
        }
    }

    @Test("One daemon per database: a second is refused with the holder's name; once another takes the lock, the first commits nothing")
    func daemonLockFences() async throws {
        let server = try await PostgresServer.shared()
        let location = try PostgresLocation(url: server.url(try await server.createDatabase()))
        let store = try await PostgresStore.open(location, password: server.password, logger: logger)
        defer { store.close() }
        let lost = Flag()
        try await store.takeDaemonLock(password: server.password, holder: "klarna-reconciler host-a pid 1") { lost.set() }
        let other = try await PostgresStore.open(location, password: server.password, logger: logger)
        defer { other.close() }
        await #expect {
            try await other.takeDaemonLock(password: server.password, holder: "klarna-reconciler host-b pid 2") {}
        } throws: { error in
            (error as? PostgresProblem)?.kind == .heldByAnotherDaemon && "\(error)".contains("klarna-reconciler host-a pid 1 from local socket")
        }
        var change = Change()
        change.health = [(name: "klarna_ok", detail: "")]
        try await store.commit(change, at: Date())

        // The lock's session ends (an administrator, a failover, a broken connection): the daemon is told, and once
        // another daemon has taken the lock, the first one's transactions are refused whatever its pool still has.
        try await server.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'klarna-reconciler host-a pid 1'")
        try await waitUntil(timeout: .seconds(10)) { lost.isSet }
        try await other.takeDaemonLock(password: server.password, holder: "klarna-reconciler host-b pid 2") {}
        await #expect { try await store.commit(change, at: Date()) } throws: { "\($0)".contains("no longer holds the store's daemon lock") }
        await #expect { try await store.markNotified(1) } throws: { "\($0)".contains("no longer holds the store's daemon lock") }
        await #expect { _ = try await store.wakeups(after: 0, includingDelivered: true) } throws: { "\($0)".contains("no longer holds") }
        try await other.commit(change, at: Date())
    }

    @Test("sslmode as libpq: prefer and require encrypt without checking a self-signed certificate; verify-full refuses it")
    func tlsModes() async throws {
        let server = try await PostgresServer.dedicated()
        try await server.enableTLS()
        let database = try await server.createDatabase()
        func location(_ mode: String) throws -> PostgresLocation {
            try PostgresLocation(url: "postgres://\(server.user)@127.0.0.1:\(server.port)/\(database)?sslmode=\(mode)")
        }
        for mode in ["prefer", "require"] {
            let store = try await PostgresStore.open(try location(mode), password: server.password, logger: logger)
            try await store.takeDaemonLock(password: server.password, holder: "tls-\(mode)") {}
            #expect(try await server.psql("SELECT ssl FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE application_name = 'tls-\(mode)'") == "t", "\(mode)")
            store.close()
        }
        await #expect { try await PostgresStore.open(try location("verify-full"), password: server.password, logger: logger) } throws: { error in
            (error as? PostgresProblem) != nil
        }
        try await server.stop()
    }

    @Test("A copy from SQLite keeps the ids and the counters: an id handed out and pruned there is not handed out again")
    func copyKeepsCounters() async throws {
        let directory = NSTemporaryDirectory() + "klarna-reconciler-copy-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sqlite = try SQLiteStore(path: directory + "/state.sqlite")
        var three = Change()
        three.outcomes = (1...3).map { Outcome(kind: .cancelled, reason: "r", hppSessionID: "s-\($0)") }
        try await sqlite.commit(three, at: Date())
        // The newest outcome pruned: SQLite never gives its id (an outbox file name) to another.
        try SQLiteConnection(path: directory + "/state.sqlite", readOnly: false, busyTimeout: .seconds(5)).execute("DELETE FROM outcomes WHERE id = 3")

        let server = try await PostgresServer.shared()
        let postgres = try await PostgresStore.open(try PostgresLocation(url: server.url(try await server.createDatabase())), password: server.password, logger: logger)
        defer { postgres.close() }
        #expect(try await postgres.isEmptyForTransfer())
        for table in TransferTable.allCases { try await postgres.importRows(table, try await sqlite.exportRows(table, offset: 0, limit: 1_000)) }
        try await postgres.finishTransfer(counters: try await sqlite.counters())
        #expect(try await !postgres.isEmptyForTransfer())
        var next = Change()
        next.outcomes = [Outcome(kind: .cancelled, reason: "r", hppSessionID: "s-4")]
        try await postgres.commit(next, at: Date())
        #expect(try await postgres.undeliveredOutcomes(now: Date(), limit: 10).map(\.id) == [1, 2, 4])
    }

    @Test("Over TCP with password authentication, as across hosts")
    func overTCP() async throws {
        let server = try await PostgresServer.shared()
        let location = try PostgresLocation(url: server.url(try await server.createDatabase(), tcp: true))
        let store = try await PostgresStore.open(location, password: server.password, logger: logger)
        defer { store.close() }
        let session = TrackedSession(
            hppSessionID: "tcp-1", kpSessionID: "kp", mode: PlaceOrderMode.none, merchantReference: nil, capturePolicy: .immediate, purpose: .buy,
            trackedAt: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(try await store.track(session, event: DomainEvent("tracked", "t"), at: session.trackedAt) == .tracked(session))
        #expect(try await store.session("tcp-1") == session)
    }
}
