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
    /// - Parameter store: more `store:` keys (a short `lease_seconds` for a test that kills the daemon).
    static func fixture(
        database: String? = nil, password: String? = nil, store: [String] = []
    ) async throws -> (DaemonFixture, PostgresServer, String) {
        let server = try await PostgresServer.shared()
        var name = database
        if name == nil { name = try await server.createDatabase() }
        let database = name!
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"] + store)
        try "\(password ?? server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        return (fixture, server, database)
    }

    static func open(_ server: PostgresServer, _ database: String) async throws -> PostgresStore {
        try await PostgresStore.open(
            try PostgresLocation(url: server.url(database)), password: server.password, migrate: false, logger: Logger(label: "test"))
    }

    @Test("A payment tracked through the command line is placed and captured once; status and show read the database")
    func paymentEndToEnd() async throws {
        let (fixture, server, database) = try await Self.fixture()
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 3_000, merchantReference: "pg-1", schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
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

/// PostgreSQL itself stopped and started under the daemon: on a server of the test's own, since the shared one
/// serves the tests running alongside.
@Suite("The daemon when PostgreSQL restarts", .serialized)
struct PostgresRestartTests {
    @Test(
        "PostgreSQL restarted under the daemon: ingest answers 503 while the server is down and acknowledges nothing; the daemon reconnects and every payment ends once"
    )
    func serverRestart() async throws {
        let server = try await PostgresServer.dedicated()  // stopped at the end, or by the exit handler if the test fails
        let database = try await server.createDatabase()
        let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password", "lease_seconds: 3"])
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        try await fixture.start()
        let before = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 2_500, merchantReference: "pg-before", schedule: [ScheduleStep(afterSeconds: 2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", before.hppSessionId, "--kp-session", before.kpSessionId, "--reference", "pg-before"]).status == 0)
        let daemon = try #require(fixture.daemon)

        try await server.stop(mode: "fast")
        let during = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 1_200, merchantReference: "pg-during", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let body = #"{"hpp_session_id":"\#(during.hppSessionId)","kp_session_id":"\#(during.kpSessionId)","merchant_reference":"pg-during"}"#
        let refused = try await fixture.post("/v1/sessions", body)
        #expect(refused.status == 503, "\(refused.body)")
        #expect(refused.body.contains("store_unavailable"), "\(refused.body)")
        #expect(daemon.isRunning)

        try await server.start()
        // The forwarder sends again, as 503 told it to; the pool reconnects on its own.
        var accepted = 0
        do {
            try await waitUntil(timeout: .seconds(60)) {
                accepted = try await fixture.post("/v1/sessions", body).status
                return accepted == 202
            }
            try await waitUntil(timeout: .seconds(60)) { fixture.outboxFiles().filter { $0.hasSuffix("captured.json") }.count == 2 }
        } catch {
            let kept = NSTemporaryDirectory() + "klarna-reconciler-restart-\(UUID().uuidString.prefix(6)).log"
            try? fixture.daemonLog.write(toFile: kept, atomically: true, encoding: .utf8)
            Issue.record("last answer \(accepted), outbox \(fixture.outboxFiles()); the daemon's log is kept in \(kept)")
            throw error
        }
        #expect(daemon.isRunning)
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 2)
        #expect(fixture.sandbox.effects(kind: .captured).compactMap(\.amount).sorted() == [1_200, 2_500])
        #expect(try await fixture.stop() == 0)
        try await server.stop()
    }
}

/// Moving an existing SQLite store to PostgreSQL with `store copy`.
@Suite("store copy", .serialized)
struct StoreCopyTests {
    @Test(
        "A SQLite daemon's store, copied into an empty database: every table's rows, the history, the counters; a daemon on PostgreSQL finishes the open payment"
    )
    func sqliteToPostgres() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let done = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 1_000, merchantReference: "copy-done", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let open = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 2_000, merchantReference: "copy-open", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", done.hppSessionId, "--kp-session", done.kpSessionId, "--reference", "copy-done"]).status == 0)
        #expect(
            try await fixture.cli([
                "track", open.hppSessionId, "--kp-session", open.kpSessionId, "--reference", "copy-open", "--capture", "on_request",
            ]).status == 0)
        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().count == 3 }  // placed, captured; placed
        let server = try await PostgresServer.shared()
        let database = try await server.createDatabase()
        try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
        let copy = [
            "store", "copy", "--from", fixture.storePath, "--to", server.url(database), "--password-file", fixture.directory + "/store-password",
        ]

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
        // The settlement ledger goes along: the capture the daemon confirmed on the file.
        let doneOrders = try await sqlite.timeline(for: "copy-done").orders.map(\.orderID)
        let fromFile = try await sqlite.ledger(orderIDs: doneOrders, account: .default).values.flatMap(\.captures)
        let copiedLedger = try await postgres.ledger(orderIDs: doneOrders, account: .default).values.flatMap(\.captures)
        #expect(fromFile.map(\.amount) == [1_000])
        #expect(copiedLedger.map(\.captureID) == fromFile.map(\.captureID) && copiedLedger.map(\.amount) == fromFile.map(\.amount))

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
