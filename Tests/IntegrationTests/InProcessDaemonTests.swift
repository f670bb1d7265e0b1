import Daemon
import Foundation
import KlarnaSandbox
import ReconcilerCore
import Testing
import TestSupport

/// The daemon as `run` assembles it (``ReconcilerDaemon``), started in the test's own process: no binary spawned, no
/// signals; the same config, store, socket, outbox and Klarna sandbox as the process tests.
@Suite("The daemon in-process")
struct InProcessDaemonTests {
    @Test(
        "Started in-process, it pays a payment end to end: tracked through the socket, ordered and captured once at Klarna, the outcome in the outbox; a reload applies a live change; stop() drains and run returns"
    )
    func paysAPaymentEndToEnd() async throws {
        let fixture = try await DaemonFixture()
        let daemon = try await fixture.startInProcess()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(
                orderAmount: 12_300, merchantReference: "in-process", schedule: [ScheduleStep(afterSeconds: 0.3, status: "COMPLETED")]))
        let tracked = try await fixture.post(
            "/v1/sessions",
            #"{"hpp_session_id":"\#(payment.hppSessionId)","kp_session_id":"\#(payment.kpSessionId)","merchant_reference":"in-process"}"#)
        #expect(tracked.status == 202, "\(tracked.body)")

        try await waitUntil(timeout: .seconds(30)) { fixture.outboxFiles().contains { $0.hasSuffix("captured.json") } }
        let placed = fixture.sandbox.effects(kind: .orderPlaced).filter { $0.kpSessionId == payment.kpSessionId }
        #expect(placed.count == 1)
        let orderID = try #require(placed.first?.orderId)
        #expect(fixture.sandbox.effects(kind: .captured).filter { $0.orderId == orderID }.map(\.amount) == [12_300])
        let store = try fixture.readStore()
        #expect(try await store.order(orderID)?.phase == .closed)

        // A reload reads the file again: log.level is live.
        try String(contentsOfFile: fixture.configPath, encoding: .utf8).replacingOccurrences(of: "level: info", with: "level: debug")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        daemon.daemon.reload()
        try await waitUntil(timeout: .seconds(10)) { daemon.logs.all.contains { $0.contains("applied log.level") } }

        try await daemon.stop()
        #expect(!daemon.daemon.isReady)
        #expect(daemon.logs.all.contains { $0.contains("klarna-reconciler stopped") })
        #expect(!daemon.logs.all.contains { $0.contains("daemon-secret") })
    }

    @Test("A stop asked for while the daemon starts: it starts, drains at once, and run returns with the listeners closed")
    func stopWhileStarting() async throws {
        let fixture = try await DaemonFixture()
        let logs = LogLines()
        let daemon = ReconcilerDaemon(
            options: .init(
                configPath: fixture.configPath, environment: ProcessInfo.processInfo.environment.merging(fixture.stateDirectory) { $1 },
                logger: logs.logger()))
        await daemon.stop()
        try await daemon.run()
        #expect(!daemon.isReady)
        #expect(logs.all.contains { $0.contains("klarna-reconciler stopped") })
        #expect(try await fixture.post("/v1/health", "", method: "GET", maxTime: 5).status == 0, "the ingest socket still answers")
    }
}
