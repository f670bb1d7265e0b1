import Foundation
import Glibc
import KlarnaSandbox
import Testing
import TestSupport
import ReconcilerStore
@testable import SQLiteBackend

/// `/v1/health` (the loops beat) and `/v1/ready` (send work here) on a daemon process over its unix socket.
@Suite("Health and readiness", .serialized)
struct ReadinessTests {
    static func json(_ body: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any], "\(body)")
    }

    @Test("health reports every loop with numbers as numbers; ready is 200 once started")
    func healthAndReady() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let health = try await fixture.post("/v1/health", "", method: "GET")
        #expect(health.status == 200, "\(health.body)")
        let report = try Self.json(health.body)
        #expect(report["status"] as? String == "ok")
        #expect(report["phase"] as? String == "ready")
        #expect(report["open"] is NSNumber && report["backlog"] is NSNumber && report["uptime_seconds"] is NSNumber, "\(health.body)")
        let loops = try #require(report["loops"] as? [[String: Any]])
        let names = Set(loops.compactMap { $0["name"] as? String })
        #expect(names.isSuperset(of: ["work loop", "spool loop", "store"]), "\(names)")
        #expect(loops.allSatisfy { $0["seconds_since_beat"] is NSNumber && $0["stalled"] as? Bool == false }, "\(loops)")

        let ready = try await fixture.post("/v1/ready", "", method: "GET")
        #expect(ready.status == 200, "\(ready.body)")
        #expect(try Self.json(ready.body)["ready"] as? Bool == true)
        #expect(try await fixture.post("/v1/ready", "{}").status == 405)
        try await fixture.kill9()
    }

    @Test("ready flips to 503 while another process holds the store's write lock, and back once it lets go; health stays 200")
    func storeOutage() async throws {
        let fixture = try await DaemonFixture()
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "  path: state/state.sqlite\n", with: "  path: state/state.sqlite\n  busy_timeout_ms: 300\n")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        try await fixture.start()
        #expect(try await fixture.post("/v1/ready", "", method: "GET").status == 200)

        let other = try SQLiteConnection(path: fixture.storePath, readOnly: false, busyTimeout: .seconds(1))
        try other.execute("BEGIN IMMEDIATE")
        var outage = ""
        try await waitUntil(timeout: .seconds(15)) {
            let answer = try await fixture.post("/v1/ready", "", method: "GET")
            outage = answer.body
            return answer.status == 503
        }
        let report = try Self.json(outage)
        #expect(report["ready"] as? Bool == false)
        #expect((report["reason"] as? String)?.contains("store unavailable") == true, "\(outage)")
        #expect((report["store"] as? String)?.contains("locked") == true, "\(outage)")
        // Alive all the same: restarting the daemon would not free the lock.
        #expect(try await fixture.post("/v1/health", "", method: "GET").status == 200)

        try other.execute("ROLLBACK")
        try await waitUntil(timeout: .seconds(15)) { try await fixture.post("/v1/ready", "", method: "GET").status == 200 }
        try await fixture.kill9()
    }

    @Test("ready answers 503 during the drain while a Klarna call is still under way, and the socket keeps answering")
    func drain() async throws {
        let fixture = try await DaemonFixture()
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "request_timeout_seconds: 2", with: "request_timeout_seconds: 20")
            .replacingOccurrences(of: "  wakeup_interval_ms: 100", with: "  wakeup_interval_ms: 100\n  drain_timeout_seconds: 25")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        fixture.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .delay, delayMs: 4_000))
        try await fixture.start()
        let payment = try fixture.sandbox.createSession(
            SessionSpec(placeOrderMode: "PLACE_ORDER", schedule: [ScheduleStep(afterSeconds: 0.2, status: "COMPLETED")]))
        #expect(try await fixture.cli(["track", payment.hppSessionId, "--kp-session", payment.kpSessionId, "--mode", "PLACE_ORDER"]).status == 0)
        try await waitUntil(timeout: .seconds(20)) { !fixture.sandbox.requests(route: "om.create_capture").isEmpty }

        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGTERM)
        var draining = ""
        try await waitUntil(timeout: .seconds(3)) {
            let answer = try await fixture.post("/v1/ready", "", method: "GET")
            draining = answer.body
            return answer.status == 503
        }
        #expect(try Self.json(draining)["phase"] as? String == "draining", "\(draining)")
        #expect(daemon.isRunning, "the drain should last as long as the capture call")
        try await waitUntil(timeout: .seconds(15)) { !daemon.isRunning }
        #expect(daemon.terminationStatus == 0)
        // The capture the drain waited for finished and was recorded.
        let store = try fixture.readStore()
        #expect(try await store.timeline(for: payment.hppSessionId).orders.first?.outcome == .captured)
    }
}
