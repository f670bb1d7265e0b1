import Foundation
import Glibc
import KlarnaSandbox
import Logging
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// The daemon with `store.url`: a real PostgreSQL server (started by the tests), password authentication, the
/// password from a credential file.
@Suite("The daemon on PostgreSQL", .serialized)
struct PostgresDaemonTests {
    /// A fixture whose store is a new database on the tests' server.
    static func fixture(database: String? = nil, password: String? = nil) async throws -> (DaemonFixture, PostgresServer, String) {
        let server = try await PostgresServer.shared()
        var name = database
        if name == nil { name = try await server.createDatabase() }
        let database = name!
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"])
        try "\(password ?? server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        return (fixture, server, database)
    }

    static func open(_ server: PostgresServer, _ database: String) async throws -> PostgresStore {
        try await PostgresStore.open(try PostgresLocation(url: server.url(database)), password: server.password, migrate: false, logger: Logger(label: "test"))
    }

    @Test("A payment tracked through the command line is placed and captured once; status and show read the database")
    func paymentEndToEnd() async throws {
        let (fixture, server, database) = try await Self.fixture()
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(SessionSpec(orderAmount: 3_000, merchantReference: "pg-1", schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
        let tracked = try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--reference", "pg-1"])
        #expect(tracked.status == 0, "\(tracked.errors)")
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("captured.json") } }
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 1)
        #expect(fixture.sandbox.effects(kind: .captured).map(\.amount) == [3_000])

        let store = try await Self.open(server, database)
        defer { store.close() }
        #expect(try await store.timeline(for: "pg-1").orders.first?.outcome == .captured)
        let status = try await fixture.cli(["status"])
        #expect(status.status == 0, "\(status.errors)")
        #expect(status.output.contains("store:          postgres://"))
        #expect(status.output.contains("orders:         1 closed"))
        let show = try await fixture.cli(["show", "pg-1"])
        #expect(show.output.contains("captured 3000"), "\(show.output)")
        #expect(try await fixture.stop() == 0)
    }

    @Test("A second daemon on the same database is refused, naming the holder; after the first is killed it takes over and finishes the work")
    func oneDaemonPerDatabase() async throws {
        let (first, server, database) = try await Self.fixture()
        try await first.start()
        let (second, _, _) = try await Self.fixture(database: database)
        let refused = try await second.cli(["run"])
        #expect(refused.status == 75, "\(refused.errors)")
        #expect(refused.errors.contains("another klarna-reconciler daemon holds this store (klarna-reconciler"), "\(refused.errors)")

        // Work tracked while the first runs, then the first dies before it can finish: the second finishes it.
        let payment = try first.sandbox.createSession(SessionSpec(orderAmount: 1_500, merchantReference: "pg-2", schedule: [ScheduleStep(afterSeconds: 3, status: "COMPLETED")]))
        #expect(try await first.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--reference", "pg-2", "--capture", "on_request"]).status == 0)
        try await first.kill9()
        // The second talks to the first's sandbox: the same Klarna account.
        try await second.start(environment: ["KLARNA_RECONCILER_KLARNA_BASE_URL": first.sandboxURL])
        let store = try await Self.open(server, database)
        defer { store.close() }
        try await waitUntil(timeout: .seconds(30)) { try await store.timeline(for: "pg-2").orders.first?.phase == .awaitingCapture }
        #expect(first.sandbox.effects(kind: .orderPlaced).count == 1)
        #expect(try await second.stop() == 0)
    }

    @Test("check-config connects and names the problem: a wrong password (78), an unreachable server (69); a good one prints the schema")
    func checkConfig() async throws {
        let (good, _, _) = try await Self.fixture()
        let ok = try await good.cli(["check-config"])
        #expect(ok.status == 0, "\(ok.errors)")
        #expect(ok.output.contains("store.password: <redacted> (file"))
        #expect(ok.output.contains("store.check: connected to postgres://"))
        #expect(ok.output.contains("schema empty: the daemon creates the schema on its first start"))

        let (wrong, _, _) = try await Self.fixture(password: "not-the-password")
        let denied = try await wrong.cli(["check-config"])
        #expect(denied.status == 78)
        #expect(denied.errors.contains("authentication failed for user postgres"), "\(denied.errors)")
        #expect(!denied.errors.contains("not-the-password") && !denied.output.contains("not-the-password"))

        let unreachable = try await DaemonFixture(storeConfig: ["url: postgres://u@127.0.0.1:\(try freeLoopbackPort())/d?sslmode=disable"])
        let down = try await unreachable.cli(["check-config"])
        #expect(down.status == 69, "\(down.errors)")
        #expect(down.errors.contains("cannot reach PostgreSQL"))

        let both = try await DaemonFixture(storeConfig: ["path: state/state.sqlite", "url: postgres://u@h/d"])
        let conflicting = try await both.cli(["check-config"])
        #expect(conflicting.status == 78)
        #expect(conflicting.errors.contains("store.url: names a PostgreSQL store, and store.path a SQLite file: set one of them"))
    }
}

/// PostgreSQL itself restarted under the daemon: on a server of the test's own, since the shared one serves the
/// tests running alongside.
@Suite("The daemon when PostgreSQL restarts", .serialized)
struct PostgresRestartTests {
    @Test("PostgreSQL restarted (fast): the daemon, its lock gone, stops with 75 and commits nothing more; started again it finishes the work once")
    func serverRestart() async throws {
        let server = try await PostgresServer.dedicated()  // stopped at the end, or by the exit handler if the test fails
        let database = try await server.createDatabase()
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"])
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 2_500, merchantReference: "pg-restart", schedule: [ScheduleStep(afterSeconds: 2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--reference", "pg-restart"]).status == 0)
        let daemon = try #require(fixture.daemon)

        try await server.restart()
        try await waitUntil(timeout: .seconds(20)) { !daemon.isRunning }
        #expect(daemon.terminationStatus == 75, "\(fixture.daemonLog.suffix(800))")
        #expect(fixture.daemonLog.contains("lost the store's daemon lock"))

        // What systemd's Restart=on-failure does: start it again; it takes the lock and the payment ends once.
        try await fixture.start()
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("captured.json") } }
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 1)
        #expect(fixture.sandbox.effects(kind: .captured).map(\.amount) == [2_500])
        #expect(try await fixture.stop() == 0)
        try await server.stop()
    }
}

/// Moving an existing SQLite store to PostgreSQL with `store copy`.
@Suite("store copy", .serialized)
struct StoreCopyTests {
    @Test("A SQLite daemon's store, copied into an empty database: every table's rows, the history, the counters; a daemon on PostgreSQL finishes the open payment")
    func sqliteToPostgres() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let done = try fixture.sandbox.createSession(SessionSpec(orderAmount: 1_000, merchantReference: "copy-done", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let open = try fixture.sandbox.createSession(SessionSpec(orderAmount: 2_000, merchantReference: "copy-open", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", done.hppSessionId, "--kp-session", done.kpSessionId, "--reference", "copy-done"]).status == 0)
        #expect(try await fixture.cli(["track", open.hppSessionId, "--kp-session", open.kpSessionId, "--reference", "copy-open", "--capture", "on_request"]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().count == 3 }  // placed, captured; placed
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        let copy = ["store", "copy", "--from", fixture.storePath, "--to", server.url(database), "--password-file", fixture.directory + "/store-password"]

        // Not while the daemon runs on the file.
        let refused = try await fixture.cli(copy)
        #expect(refused.status == 75)
        #expect(refused.errors.contains("stop the daemon"))
        #expect(try await fixture.stop() == 0)

        let copied = try await fixture.cli(copy)
        #expect(copied.status == 0, "\(copied.errors)")
        #expect(copied.output.contains("sessions 2, orders 2"), "\(copied.output)")
        let again = try await fixture.cli(copy)
        #expect(again.status == 73)
        #expect(again.errors.contains("holds a store already"))

        let sqlite = try fixture.readStore()
        let postgres = try await PostgresDaemonTests.open(server, database)
        defer { postgres.close() }
        for id in ["copy-done", "copy-open"] {
            let before = try await sqlite.timeline(for: id), after = try await postgres.timeline(for: id)
            #expect(after.sessions == before.sessions && after.orders == before.orders && after.intents == before.intents)
            #expect(after.events.map(\.id) == before.events.map(\.id) && after.events.map(\.message) == before.events.map(\.message))
            #expect(after.outcomes.map(\.id) == before.outcomes.map(\.id))
            #expect(after.outcomes.allSatisfy { $0.outboxWritten })
        }

        // The same folder's daemon, now on PostgreSQL: it captures the open order, and its new outcome takes the next id.
        let moved = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"])
        try "\(server.password)\n".write(toFile: moved.directory + "/store-password", atomically: true, encoding: .utf8)
        try await moved.start(environment: ["KLARNA_RECONCILER_KLARNA_BASE_URL": fixture.sandboxURL])
        let order = try #require(try await postgres.timeline(for: "copy-open").orders.first)
        let capture = try await moved.cli(["capture", order.orderID])
        #expect(capture.status == 0, "\(capture.errors)")
        try await waitUntil(timeout: .seconds(30)) { moved.outboxFiles().contains { $0.hasSuffix("captured.json") } }
        #expect(moved.outboxFiles().first { $0.hasSuffix("captured.json") }?.contains("-000000000004-") == true, "\(moved.outboxFiles())")
        #expect(fixture.sandbox.effects(kind: .captured).compactMap(\.amount).sorted() == [1_000, 2_000])
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 2)
        #expect(try await moved.stop() == 0)
    }
}
