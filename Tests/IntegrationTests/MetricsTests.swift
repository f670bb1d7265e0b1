import ChildProcess
import Foundation
import Glibc
import KlarnaSandbox
import Testing
import TestSupport

/// `/metrics` on a daemon process, read by the Prometheus client library's own text parser (Debian's
/// python3-prometheus-client), with values that match what the test made happen.
@Suite("Prometheus metrics", .serialized)
struct MetricsTests {
    struct Sample: Decodable {
        let name: String
        let labels: [String: String]
        let value: Double
    }

    /// The exposition parsed by `prometheus_client.parser`; a text it cannot parse fails the test. (Waited for
    /// without blocking a thread of the task pool: the in-process sandboxes of the tests alongside need them.)
    static func parse(_ text: String, in directory: String) async throws -> [Sample] {
        let input = directory + "/metrics-\(UUID().uuidString.prefix(6)).txt"
        try text.write(toFile: input, atomically: true, encoding: .utf8)
        let (status, complaint) = try await Command.run(
            "/usr/bin/python3",
            [
                "-c",
                """
                import json, sys
                from prometheus_client.parser import text_string_to_metric_families
                samples = [{"name": s.name, "labels": s.labels, "value": s.value}
                           for family in text_string_to_metric_families(open(sys.argv[1]).read()) for s in family.samples]
                open(sys.argv[1] + ".json", "w").write(json.dumps(samples))
                """, input,
            ])
        try #require(status == 0, "the Prometheus parser refused /metrics: \(complaint)")
        return try JSONDecoder().decode([Sample].self, from: Data(contentsOf: URL(fileURLWithPath: input + ".json")))
    }

    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    @Test("the counters and gauges say what happened: calls by result, outcomes, deliveries and refusals, open and held work, the spool's quarantine")
    func valuesMatch() async throws {
        let port = try freeLoopbackPort()
        let fixture = try await DaemonFixture(extraConfig: "metrics:\n  listen: 127.0.0.1:\(port)\n")
        // Counted calls must end as Klarna answered them: a patient client (the fixture's 2 s once turned the 429
        // below into a transport error on loaded cores).
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "request_timeout_seconds: 2", with: "request_timeout_seconds: 15")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        // The first HPP read of all is answered 429: counted as rate_limited, then read again.
        fixture.sandbox.addFault(SandboxFault(route: "hpp.read_session", kind: .rateLimit, resetSeconds: 1))
        try await fixture.start()

        let paid = try fixture.sandbox.createSession(
            SessionSpec(
                merchantReference: "m-paid", placeOrderMode: "PLACE_ORDER", schedule: [ScheduleStep(afterSeconds: 0.1, status: "COMPLETED")]))
        let track = try await fixture.post(
            "/v1/sessions",
            #"{"hpp_session_id":"\#(paid.hppSessionId)","kp_session_id":"\#(paid.kpSessionId)","place_order_mode":"PLACE_ORDER","capture":"immediate","merchant_reference":"m-paid"}"#
        )
        #expect(track.status == 202, "\(track.body)")
        let waiting = try fixture.sandbox.createSession(SessionSpec(merchantReference: "m-held"))
        #expect(try await fixture.cli(["track", waiting.hppSessionId, "--kp-session", waiting.kpSessionId, "--reference", "m-held"]).status == 0)
        #expect(try await fixture.cli(["hold", "m-held"]).status == 0)
        #expect(
            try await fixture.post("/v1/webhooks/hpp-status?kp_session_id=\(waiting.kpSessionId)", #"{"event_id":"e","session":{"session_id":"x"}}"#)
                .status == 401)
        try "not a webhook".write(toFile: fixture.directory + "/spool/new/broken.json", atomically: true, encoding: .utf8)

        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(20)) { try await store.timeline(for: "m-paid").orders.first?.outcome == .captured }

        var samples: [Sample] = []
        let expected: [(String, [String: String], Double)] = [
            ("klarna_reconciler_outcomes_total", ["kind": "order_placed"], 1),
            ("klarna_reconciler_outcomes_total", ["kind": "captured"], 1),
            ("klarna_reconciler_klarna_calls_total", ["account": "default", "operation": "om.create_capture", "result": "ok"], 1),
            ("klarna_reconciler_klarna_calls_total", ["account": "default", "operation": "hpp.read_session", "result": "rate_limited"], 1),
            ("klarna_reconciler_klarna_call_duration_seconds_count", ["account": "default", "operation": "om.create_capture"], 1),
            ("klarna_reconciler_intents_finished_total", ["kind": "capture", "state": "confirmed"], 1),
            ("klarna_reconciler_deliveries_total", ["source": "socket", "result": "accepted"], 1),
            ("klarna_reconciler_deliveries_total", ["source": "socket", "result": "refused"], 1),
            ("klarna_reconciler_refusals_total", ["source": "socket", "reason": "missing_token"], 1),
            ("klarna_reconciler_refusals_total", ["source": "spool", "reason": "unknown_format"], 1),
            ("klarna_reconciler_spool_quarantined_files", [:], 1),
            ("klarna_reconciler_spool_new_files", [:], 0),
            ("klarna_reconciler_held", [:], 1),
            ("klarna_reconciler_open_sessions", ["phase": "polling"], 1),
            ("klarna_reconciler_open_orders", ["phase": "capturing"], 0),
            ("klarna_reconciler_unfinished_intents", ["state": "sent"], 0),
            ("klarna_reconciler_outbox_backlog", [:], 0),
            ("klarna_reconciler_ready", [:], 1),
        ]
        // The store's gauges are read at most every 5 s: wait until they have caught up (the expectations below
        // name any that never do).
        try? await waitUntil(timeout: .seconds(20)) {
            let scrape = try await fixture.post("/metrics", "", method: "GET")
            guard scrape.status == 200 else { return false }
            samples = try await Self.parse(scrape.body, in: fixture.directory)
            return expected.allSatisfy { Self.value(samples, $0.0, $0.1) == $0.2 }
        }
        for (name, labels, value) in expected {
            #expect(Self.value(samples, name, labels) == value, "\(name)\(labels): \(samples.filter { $0.name == name })")
        }
        #expect((Self.value(samples, "klarna_reconciler_store_commit_duration_seconds_count") ?? 0) > 0)
        #expect((Self.value(samples, "klarna_reconciler_oldest_open_age_seconds") ?? 0) > 0)
        #expect(
            samples.allSatisfy { sample in !sample.labels.values.contains { $0.contains(paid.hppSessionId) || $0.contains(waiting.hppSessionId) } },
            "an id in a label")

        // The shipped alerting rules and dashboard use only metrics and labels this exposition has, and promtool
        // accepts the exposition (a HELP line for every family). Only the settlement sync's metrics (settlements are
        // off here) may be missing, and the checker names them.
        let exposition = fixture.directory + "/metrics-for-rules.txt"
        try await fixture.post("/metrics", "", method: "GET").body.write(toFile: exposition, atomically: true, encoding: .utf8)
        let checker = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../scripts/check-prometheus.py")
            .standardized.path
        let (checked, report) = try await Command.run("/usr/bin/python3", [checker, "--fresh", exposition])
        #expect(checked == 0, "\(report)")
        let unchecked = report.split(separator: "\n").filter { $0.hasPrefix("  - klarna_reconciler_") }
        let settlementOnly = ["settlement_", "payouts_reconciled", "unsettled_captures", "newest_payout"]
        #expect(unchecked.allSatisfy { line in settlementOnly.contains { line.contains("klarna_reconciler_" + $0) } }, "\(unchecked)")

        // The loopback port serves what a monitoring system reads, and nothing else.
        let direct = try await fixture.post("/metrics", "", method: "GET", via: "http://127.0.0.1:\(port)")
        #expect(direct.status == 200)
        #expect(Self.value(try await Self.parse(direct.body, in: fixture.directory), "klarna_reconciler_held") == 1)
        #expect(try await fixture.post("/v1/ready", "", method: "GET", via: "http://127.0.0.1:\(port)").status == 200)
        #expect(try await fixture.post("/v1/sessions", "{}", via: "http://127.0.0.1:\(port)").status == 404)
        try await fixture.kill9()
    }

    @Test("metrics.listen must be loopback")
    func loopbackOnly() async throws {
        let fixture = try await DaemonFixture(extraConfig: "metrics:\n  listen: 0.0.0.0:9100\n")
        let check = try await fixture.cli(["check-config"])
        #expect(check.status == 78)
        #expect(check.errors.contains("metrics.listen: must be a loopback HOST:PORT"), "\(check.errors)")
    }
}
