import ChildProcess
import Foundation
import Glibc
import KlarnaSandbox
import PostgresBackend
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Testing
import TestSupport

/// The daemon as a process with the directories it writes on a small filesystem of their own (a tmpfs, as root),
/// filled to the last byte while payments are mid-flight and Klarna's answers are held; killed with SIGKILL on the
/// full disk and started again on it; then the space given back.
@Suite(
    "A full disk under the daemon as a process",
    .enabled(if: SmallDisk.canMount, "mounting a small filesystem needs root (CI and the development machines run as root)"))
struct DiskFullProcessTests {
    /// Which directories sit on the disk that fills: all three together, or each apart.
    enum Filled: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case all, store, spool, outbox
        var testDescription: String { rawValue }
        func holds(_ role: DiskRole) -> Bool { self == .all || rawValue == role.rawValue }
    }

    /// How long the disk stays full after the restart on it.
    static let fullFor: Duration = .seconds(
        Int(ProcessInfo.processInfo.environment["KLARNA_RECONCILER_DISK_FULL_SECONDS"] ?? "") ?? 3)

    @Test(
        "Filled while a create-order's and a capture's answers are held: both recorded, deliveries refused 503 disk_full and spool files left, kill -9 and a start on the full disk wait, space back ends every payment once",
        arguments: Filled.allCases)
    func fullDisk(filled: Filled) async throws {
        try await SmallDisk.with(megabytes: 24) { disk in try await scenario(filled, disk) }
    }

    @Test(
        "A first start on a full disk (no store, no reserve yet): it waits for the store, says why in STATUS= and the journal, extends the start timeout, never exits; space back, it starts and pays"
    )
    func startWaits() async throws {
        try await SmallDisk.with(megabytes: 8) { disk in
            let fixture = try await DaemonFixture(
                storeConfig: ["path: \(disk.path)/state/state.sqlite"], diskConfig: ["min_free_mb: 1", "reserve_mb: 1"])
            try FileManager.default.createDirectory(atPath: disk.path + "/state", withIntermediateDirectories: true)
            try disk.fill()
            try await fixture.start(waitForReady: false)
            try await waitUntil(timeout: .seconds(20)) {
                let told = try await fixture.notifications
                return told.contains {
                    $0.contains("EXTEND_TIMEOUT_USEC=") && $0.contains("STATUS=waiting for the store: cannot open \(fixture.storePath)")
                }
                    && told.filter { $0.contains("STATUS=waiting for the store") }.count >= 3
            }
            #expect(try await !fixture.notifications.contains { $0.hasPrefix("READY=1") })
            #expect(fixture.daemon?.isRunning == true, "it waits, it does not exit: \(fixture.daemonLog.suffix(800))")
            #expect(fixture.daemonLog.contains("message_id=\(MessageID.storeWaiting.rawValue)"))
            #expect(fixture.daemonLog.contains("database or disk is full"))
            #expect(fixture.daemonLog.contains("free in \(disk.path)/state"), "the error names the free space")

            try await disk.free()
            try await waitUntil(timeout: .seconds(30)) { try await fixture.notifications.contains { $0.hasPrefix("READY=1") } }
            try await waitUntil(timeout: .seconds(10)) { FileManager.default.fileExists(atPath: fixture.storePath + ".reserve") }
            let payment = try fixture.sandbox.createSession(
                SessionSpec(orderAmount: 1_200, merchantReference: "after-wait", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
            let body = #"{"hpp_session_id":"\#(payment.hppSessionId)","kp_session_id":"\#(payment.kpSessionId)","capture":"immediate"}"#
            #expect(try await fixture.post("/v1/sessions", body).status == 202)
            let store = try fixture.readStore()
            try await waitUntil(timeout: .seconds(30)) {
                try await store.timeline(for: payment.hppSessionId).outcomes.map(\.outcome.kind) == [.orderPlaced, .captured]
            }
            #expect(try await fixture.stop() == 0)
        }
    }

    private func scenario(_ filled: Filled, _ disk: SmallDisk) async throws {
        func place(_ role: DiskRole, _ name: String) -> String { filled.holds(role) ? "\(disk.path)/\(name)" : name }
        let fixture = try await DaemonFixture(
            storeConfig: ["path: \(place(.store, "state/state.sqlite"))"], outboxDir: place(.outbox, "outbox"), spoolDir: place(.spool, "spool"),
            diskConfig: ["min_free_mb: 2", "reserve_mb: 2"])
        try await fixture.start()
        let reserve = fixture.storePath + ".reserve"
        #expect(FileManager.default.fileExists(atPath: reserve), "the reserve is made at start")

        // Payment A: Klarna places its order at once and answers 1.5 s later (within the fixture's 2 s timeout). Payment B: placed, waiting for a capture
        // request; its capture's answer is held too.
        let placing = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 3_100, merchantReference: "disk-a", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let capturing = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 4_200, merchantReference: "disk-b", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let track = { (created: CreatedSession, policy: String) in
            #"{"hpp_session_id":"\#(created.hppSessionId)","kp_session_id":"\#(created.kpSessionId)","capture":"\#(policy)"}"#
        }
        #expect(try await fixture.post("/v1/sessions", track(capturing, "on_request")).status == 202)
        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(30)) { try await store.session(capturing.hppSessionId)?.orderID != nil }
        let orderB = try #require(try await store.session(capturing.hppSessionId)?.orderID)
        try await waitUntil(timeout: .seconds(30)) { try await store.order(orderB)?.phase == .awaitingCapture }

        fixture.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 1.5, count: 1))
        fixture.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .holdAnswer, holdSeconds: 1.5, count: 1))
        #expect(try await fixture.post("/v1/sessions", track(placing, "immediate")).status == 202)
        #expect(try await fixture.post("/v1/orders/\(orderB)/capture", "{}").status == 202)
        try await waitUntil(timeout: .seconds(30)) {
            fixture.sandbox.requests(route: "kp.create_order").count == 2 && fixture.sandbox.requests(route: "om.create_capture").count == 1
        }
        // A spool file written before the disk filled, moved into new/ after (a rename takes no space).
        let late = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 5_300, merchantReference: "disk-c", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        try track(late, "immediate").write(toFile: fixture.spoolDirectory + "/tmp/late.json", atomically: false, encoding: .utf8)

        // Both answers are on their way: the disk fills to the last byte.
        try disk.fill()
        try await waitUntil(timeout: .seconds(10)) { try await fixture.post("/v1/ready", "", method: "GET").status == 503 }
        rename(fixture.spoolDirectory + "/tmp/late.json", fixture.spoolDirectory + "/new/late.json")
        let ready = try await fixture.post("/v1/ready", "", method: "GET")
        #expect(ready.body.contains(#""error":"disk_full""#), "\(ready.body)")
        let refused = try await fixture.post("/v1/sessions", track(late, "immediate"))
        #expect(refused.status == 503)
        #expect(refused.body.contains("disk_full") && refused.body.contains("directory \(disk.path)"), "\(refused.body)")
        // An operator's request is written to the store before the engine acts on it: refused alike.
        let hold = try await fixture.post("/v2/payments/\(orderB)/hold", "{}", socket: fixture.controlPath)
        #expect(hold.status == 503 && hold.body.contains("disk_full"), "\(hold.body)")

        // Klarna's answers arrive on the full disk: with the store's filesystem full the reserve is given back for them.
        try await waitUntil(timeout: .seconds(30)) {
            let placed = try await store.session(placing.hppSessionId)?.orderID != nil
            let captured = try await store.intents(subject: orderB).contains { $0.kind == .capture && $0.state == .confirmed }
            return placed && captured
        }
        if filled.holds(.store) { #expect(!FileManager.default.fileExists(atPath: reserve), "the reserve was given back") }
        #expect(fixture.spoolNames("new") == ["late.json"], "the spool file waits where it was")
        let status = try await fixture.cli(["status"])
        #expect(status.status == 1)
        #expect(status.output.contains("disk:           disk full:"), "\(status.output)")

        // Killed on the full disk, started on it: it waits for room instead of exiting.
        try await fixture.kill9()
        try disk.fill()
        try await fixture.start(waitForReady: false)
        try await waitUntil(timeout: .seconds(20)) {
            try await fixture.notifications.contains { $0.contains("STATUS=disk full") || $0.contains("STATUS=waiting for the store") }
        }
        let waited = try await fixture.notifications.contains { $0.contains("STATUS=waiting for the store") }
        #expect(try await fixture.post("/v1/ready", "", method: "GET", maxTime: 2).status != 200)
        // Held full as long as the run asks (KLARNA_RECONCILER_DISK_FULL_SECONDS; 10 minutes for the figure in
        // docs/operations.md), a few seconds by default; the daemon keeps running and keeps the disk topped up.
        let fullUntil = ContinuousClock.now + Self.fullFor
        while ContinuousClock.now < fullUntil {
            try disk.fill()
            // Read as systemd reads it: a notify socket nobody reads fills up, and the daemon's next sd_notify blocks.
            _ = try await fixture.notifications
            try await Task.sleep(for: .seconds(1))
        }
        #expect(fixture.daemon?.isRunning == true, "\(fixture.daemonLog.suffix(800))")

        // Space back: every payment ends, once, without an operator.
        let freed = ContinuousClock.now
        try await disk.free()
        var outcomes: [[OutcomeKind]] = []
        do {
            try await waitUntil(timeout: .seconds(60)) { try await fixture.post("/v1/ready", "", method: "GET").status == 200 }
            try await waitUntil(timeout: .seconds(60)) { try await fixture.post("/v1/sessions", track(late, "immediate")).status == 202 }
            try await waitUntil(timeout: .seconds(120)) {
                outcomes = []
                for payment in [placing, capturing, late] {
                    outcomes.append(try await store.timeline(for: payment.hppSessionId).outcomes.map(\.outcome.kind))
                }
                let delivered = try await store.summary(now: Date()).undeliveredOutcomes == 0
                return outcomes.allSatisfy { $0 == [.orderPlaced, .captured] } && delivered && fixture.spoolNames("new").isEmpty
            }
        } catch {
            Issue.record("after the space returned (\(ContinuousClock.now - freed)): outcomes \(outcomes); \(fixture.daemonLog.suffix(3_000))")
            throw error
        }
        let took = ContinuousClock.now - freed
        #expect(took < .seconds(120))
        #expect(fixture.sandbox.createOrderCounts().allSatisfy { $0.received == 1 })
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 3)
        #expect(Dictionary(grouping: fixture.sandbox.effects(kind: .captured), by: { $0.orderId ?? "" }).values.allSatisfy { $0.count == 1 })
        #expect(fixture.sandbox.effects(kind: .captured).count == 3)
        let outcomeCount = try await store.summary(now: Date()).outcomesByKind.values.reduce(0, +)
        #expect(outcomeCount == 6)
        #expect(Set(fixture.outboxFiles()).count == outcomeCount, "each outcome in the outbox once")
        try await waitUntil(timeout: .seconds(10)) { FileManager.default.fileExists(atPath: reserve) }
        #expect(try await fixture.stop() == 0)
        #expect(!fixture.daemonLog.contains("daemon-secret"))
        print(
            "full disk (\(filled.rawValue)): full for \(Self.fullFor) after the restart (\(waited ? "the start waited for the store" : "started, not ready")); every payment ended \(took) after the space returned"
        )
    }
}

/// The shared store's server refusing writes for a while (a read-only database: SQLSTATE 25006, the same path as a
/// full disk's 53100 and too many connections' 53300) while Klarna's answer to a create-order is on its way.
@Suite("A PostgreSQL server that refuses writes under the daemon")
struct PostgresRefusalTests {
    @Test(
        "The server turns read-only while a create-order's answer is held: the answer is kept and its order id journaled, deliveries get 503 store_unavailable, ready is 503; writable again, the payment ends once without an operator"
    )
    func readOnlyServer() async throws {
        let (fixture, server, database) = try await PostgresDaemonTests.fixture()
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 2_500, merchantReference: "pg-ro", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        fixture.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 1.5, count: 1))
        let track = { (created: CreatedSession) in
            #"{"hpp_session_id":"\#(created.hppSessionId)","kp_session_id":"\#(created.kpSessionId)","capture":"immediate"}"#
        }
        #expect(try await fixture.post("/v1/sessions", track(payment)).status == 202)
        try await waitUntil(timeout: .seconds(30)) { !fixture.sandbox.requests(route: "kp.create_order").isEmpty }

        // Every session of the database from now on is read-only; the pool's are ended so that it opens new ones.
        func setReadOnly(_ on: Bool) async throws {
            _ = try await server.psql(
                on
                    ? "ALTER DATABASE \(database) SET default_transaction_read_only = on"
                    : "ALTER DATABASE \(database) RESET default_transaction_read_only")
            _ = try await server.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(database)'")
        }
        try await setReadOnly(true)
        let placed = try #require(await waitForPlacedOrder(fixture))
        try await waitUntil(timeout: .seconds(30)) {
            fixture.daemonLog.contains("message_id=\(MessageID.answerUnrecorded.rawValue)") && fixture.daemonLog.contains("result \(placed)")
        }
        #expect(fixture.daemonLog.contains("SQLSTATE 25006"), "the refusal is named: \(fixture.daemonLog.suffix(600))")
        try await waitUntil(timeout: .seconds(20)) { try await fixture.post("/v1/ready", "", method: "GET").status == 503 }
        let other = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 2_600, merchantReference: "pg-ro-2", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let refused = try await fixture.post("/v1/sessions", track(other))
        #expect(refused.status == 503)
        #expect(refused.body.contains("store_unavailable"))

        let writable = ContinuousClock.now
        try await setReadOnly(false)
        try await waitUntil(timeout: .seconds(60)) { try await fixture.post("/v1/sessions", track(other)).status == 202 }
        let store = try await PostgresDaemonTests.open(server, database)
        defer { store.close() }
        try await waitUntil(timeout: .seconds(120)) {
            var ended = true
            for created in [payment, other] {
                let outcomes = try await store.timeline(for: created.hppSessionId).outcomes.map(\.outcome.kind)
                ended = ended && outcomes == [.orderPlaced, .captured]
            }
            return ended
        }
        let took = ContinuousClock.now - writable
        try await waitUntil(timeout: .seconds(20)) { try await fixture.post("/v1/ready", "", method: "GET").status == 200 }
        #expect(try await store.session(payment.hppSessionId)?.orderID == placed)
        #expect(fixture.sandbox.createOrderCounts().allSatisfy { $0.received == 1 })
        #expect(fixture.sandbox.effects(kind: .captured).count == 2)
        #expect(try await fixture.stop() == 0)
        print("read-only PostgreSQL: every payment ended \(took) after the server took writes again")
    }

    @Test(
        "The server's own disk fills (its data directory on a small filesystem) while a create-order's answer is held: deliveries get 503 once the server cannot extend a table, the answer is kept (SQLSTATE 53100 named), ready is 503; space back, the payment ends once",
        .enabled(if: SmallDisk.canMount, "mounting a small filesystem needs root (CI and the development machines run as root)"))
    func serverDiskFull() async throws {
        try await SmallDisk.with(megabytes: 128) { disk in
            // Stopped at the end, or by the exit handler if the test fails.
            let server = try await PostgresServer.dedicated(directory: disk.path + "/pg")
            let database = try await server.createDatabase()
            let fixture = try await DaemonFixture(storeConfig: ["url: \(server.url(database))", "password_file: store-password"])
            try "\(server.password)\n".write(toFile: fixture.directory + "/store-password", atomically: true, encoding: .utf8)
            // A patient client: Klarna's answer is held while the disk fills and the deliveries find it full.
            let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
            try config.replacingOccurrences(of: "request_timeout_seconds: 2", with: "request_timeout_seconds: 20")
                .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
            try await fixture.start()
            let payment = try fixture.sandbox.createSession(
                SessionSpec(orderAmount: 2_700, merchantReference: "pg-full", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
            fixture.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .holdAnswer, holdSeconds: 8, count: 1))
            let track = { (hpp: String, kp: String) in
                #"{"hpp_session_id":"\#(hpp)","kp_session_id":"\#(kp)","capture":"immediate","merchant_reference":"\#(String(repeating: "r", count: 200))"}"#
            }
            #expect(try await fixture.post("/v1/sessions", track(payment.hppSessionId, payment.kpSessionId)).status == 202)
            try await waitUntil(timeout: .seconds(30)) { !fixture.sandbox.requests(route: "kp.create_order").isEmpty }

            // Full: small writes still fit in the pages the tables have; the deliveries fill those until a table must
            // grow, which the server refuses.
            try disk.fill()
            var refused: (status: Int, body: String) = (0, "")
            for index in 0..<400 where refused.status != 503 {
                refused = try await fixture.post("/v1/sessions", track("filler-\(index)", "kp-filler-\(index)"))
            }
            #expect(refused.status == 503, "a delivery the server could not record is refused")
            #expect(refused.body.contains("store_unavailable"))
            try await waitUntil(timeout: .seconds(30)) { fixture.daemonLog.contains("message_id=\(MessageID.answerUnrecorded.rawValue)") }
            #expect(fixture.daemonLog.contains("SQLSTATE 53100"), "the refusal is named: \(fixture.daemonLog.suffix(600))")
            let placed = try #require(fixture.sandbox.effects(kind: .orderPlaced).first?.orderId)
            #expect(fixture.daemonLog.contains("result \(placed)"), "the order id is in the journal before it is recorded")
            try await waitUntil(timeout: .seconds(20)) { try await fixture.post("/v1/ready", "", method: "GET").status == 503 }

            let freed = ContinuousClock.now
            try await disk.free()
            let store = try await PostgresDaemonTests.open(server, database)
            defer { store.close() }
            try await waitUntil(timeout: .seconds(120)) {
                try await store.timeline(for: payment.hppSessionId).outcomes.map(\.outcome.kind) == [.orderPlaced, .captured]
            }
            let took = ContinuousClock.now - freed
            #expect(try await store.session(payment.hppSessionId)?.orderID == placed)
            try await waitUntil(timeout: .seconds(30)) { try await fixture.post("/v1/ready", "", method: "GET").status == 200 }
            #expect(fixture.sandbox.createOrderCounts().allSatisfy { $0.received == 1 })
            #expect(try await fixture.stop() == 0)
            try await server.stop(mode: "fast")
            print("PostgreSQL's disk full: the held payment ended \(took) after the space returned")
        }
    }

    @Test(
        "Started on a read-only server: the daemon comes up not ready (/v1/ready says it waits for the store), never exits; writable again, it loads its work and pays"
    )
    func startOnReadOnlyServer() async throws {
        let (fixture, server, database) = try await PostgresDaemonTests.fixture()
        try await fixture.start()
        #expect(try await fixture.stop() == 0)
        _ = try await server.psql("ALTER DATABASE \(database) SET default_transaction_read_only = on")
        try await fixture.start()
        try await waitUntil(timeout: .seconds(20)) {
            let ready = try await fixture.post("/v1/ready", "", method: "GET")
            return ready.status == 503 && ready.body.contains("waiting for the store to load the open work") && ready.body.contains("SQLSTATE 25006")
        }
        #expect(fixture.daemonLog.contains("message_id=\(MessageID.storeWaiting.rawValue)"))
        #expect(fixture.daemon?.isRunning == true)

        _ = try await server.psql("ALTER DATABASE \(database) RESET default_transaction_read_only")
        _ = try await server.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(database)'")
        try await waitUntil(timeout: .seconds(60)) { try await fixture.post("/v1/ready", "", method: "GET").status == 200 }
        let payment = try fixture.sandbox.createSession(
            SessionSpec(orderAmount: 1_900, merchantReference: "pg-start", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        let body = #"{"hpp_session_id":"\#(payment.hppSessionId)","kp_session_id":"\#(payment.kpSessionId)","capture":"immediate"}"#
        #expect(try await fixture.post("/v1/sessions", body).status == 202)
        let store = try await PostgresDaemonTests.open(server, database)
        defer { store.close() }
        try await waitUntil(timeout: .seconds(30)) {
            try await store.timeline(for: payment.hppSessionId).outcomes.map(\.outcome.kind) == [.orderPlaced, .captured]
        }
        #expect(try await fixture.stop() == 0)
    }

    /// The order Klarna placed (the sandbox's record), once it has.
    private func waitForPlacedOrder(_ fixture: DaemonFixture) async throws -> String? {
        try await waitUntil(timeout: .seconds(30)) { !fixture.sandbox.effects(kind: .orderPlaced).isEmpty }
        return fixture.sandbox.effects(kind: .orderPlaced).first?.orderId
    }
}
