import Engine
import Foundation
import HTTPServer
import Ingest
import Logging
import ReconcilerCore
import ReconcilerStore
import SQLiteBackend
import Settings
import Testing
import TestSupport

/// What anyone can send to the ingest socket without authenticating: every refusal recorded (a wrong method and an
/// unknown route too), and the store kept small: refusals and OM notifications for unknown orders by their own
/// retention and a cap, checked every minute.
@Suite("Unauthenticated traffic: refusals recorded, the store bounded")
struct UnverifiedRetentionTests {
    /// The ingest socket's handler over `store`, reading with no callback key or signing keys (OM notifications and
    /// track requests need none).
    func ingestHandler(_ store: SQLiteStore, clock: any WallClock) -> @Sendable (ServerRequest) async -> ServerReply {
        let ingestor = Ingestor(
            reader: WebhookReader(tokens: nil, policy: .require, signingKeys: SigningKeys([:])), store: store, defaultCapturePolicy: .immediate,
            clock: clock, logger: Logger(label: "test")
        ) { _, _ in }
        let control = ControlEndpoints(
            health: { HealthReport(heartbeats: [], stallAfter: .seconds(30), phase: .ready, uptime: .zero, open: 0, running: 0, backlog: 0) },
            readiness: Readiness(storeStaleAfter: .seconds(5)))
        return IngestHTTP.handler(ingestor, control: control)
    }

    func send(
        _ handler: @Sendable (ServerRequest) async -> ServerReply, _ method: String, _ target: String, _ body: String = ""
    ) async -> (status: Int, body: String) {
        guard case .response(let response) = await handler(ServerRequest(method: method, uri: target, body: Array(body.utf8))) else {
            Issue.record("\(target): the connection was reset")
            return (0, "")
        }
        return (response.status, String(decoding: response.body, as: UTF8.self))
    }

    func notification(_ orderID: String) -> String { #"{"order_id":"\#(orderID)","event_type":"FRAUD_RISK_ACCEPTED"}"# }

    @Test("A wrong method on a known route (405) and an unknown route (404) are recorded like every refusal, without the query")
    func wrongMethodAndRouteRecorded() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let handler = ingestHandler(store, clock: ManualClock(now: Fixtures.t0))

        let wrongMethod = await send(handler, "GET", "/v1/webhooks/hpp-status?kp_session_id=kp-1&token=secret-token")
        #expect(wrongMethod.status == 405 && wrongMethod.body.contains(#""error":"method_not_allowed""#), "\(wrongMethod.body)")
        var summary = try await store.summary(now: Fixtures.t0)
        #expect(summary.rejectionsLastDay == 1)
        #expect(
            summary.lastRejection?.hasSuffix("socket 405 method_not_allowed: GET is not allowed on /v1/webhooks/hpp-status") == true,
            "\(summary.lastRejection ?? "none")")

        let unknownRoute = await send(handler, "POST", "/v1/webhook/om-notification?token=secret-token", notification("o-1"))
        #expect(unknownRoute.status == 404 && unknownRoute.body.contains(#""error":"not_found""#), "\(unknownRoute.body)")
        summary = try await store.summary(now: Fixtures.t0)
        #expect(summary.rejectionsLastDay == 2)
        #expect(
            summary.lastRejection?.hasSuffix("socket 404 not_found: no route POST /v1/webhook/om-notification") == true,
            "\(summary.lastRejection ?? "none")")
        #expect(summary.lastRejection?.contains("secret-token") == false)
    }

    @Test("OM notifications for unknown orders go after their own retention; one for a known order stays with the delivery records")
    func unknownNotificationsByAge() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        var change = Change()
        change.newOrders = [
            TrackedOrder(
                orderID: "o-known", hppSessionID: nil, kpSessionID: nil, merchantReference: "known", capturePolicy: .immediate, placedBy: .placeOrder,
                createdAt: Fixtures.t0)
        ]
        try await store.commit(change, at: Fixtures.t0)
        let clock = ManualClock(now: Fixtures.t0)
        let handler = ingestHandler(store, clock: clock)
        for order in ["o-known", "o-unknown"] {
            let answer = await send(handler, "POST", "/v1/webhooks/om-notification", notification(order))
            #expect(answer.status == 202 && answer.body.contains(#""status":"accepted""#), "\(order): \(answer.body)")
        }

        let policy = RetentionPolicy(closedPayments: .seconds(90 * 86_400), unknownNotifications: .seconds(7 * 86_400))
        clock.advance(by: .seconds(6 * 86_400))
        #expect(try await Pruner(store: store, policy: policy, doneDirectory: nil, clock: clock).run(dryRun: false).isEmpty)
        clock.advance(by: .seconds(2 * 86_400))
        let pruned = try await Pruner(store: store, policy: policy, doneDirectory: nil, clock: clock).run(dryRun: false)
        #expect(pruned.unknownNotifications == 1 && pruned.deliveries == 0, "\(pruned)")
        // The known order's notification is still recognised when Klarna sends it again; the unknown one is new again.
        #expect(await send(handler, "POST", "/v1/webhooks/om-notification", notification("o-known")).body.contains(#""status":"repeat""#))
        #expect(await send(handler, "POST", "/v1/webhooks/om-notification", notification("o-unknown")).body.contains(#""status":"accepted""#))
    }

    @Test("Between two passes the retention loop applies the cap every minute, and only the cap; the age rules wait for the pass")
    func capEveryMinute() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteStore(path: directory.path + "/state.sqlite")
        let clock = ManualClock(now: Fixtures.t0)
        let handler = ingestHandler(store, clock: clock)
        // Long past its retention, but within the cap: only a pass removes it.
        let old = try await store.ingest(
            IngestRecord(
                dedupeKey: "\(RetentionPolicy.omNotificationKeyPrefix)o-old:FRAUD_RISK_STOPPED", kind: RetentionPolicy.omNotificationKind,
                source: "socket",
                summary: "OM notification FRAUD_RISK_STOPPED for order o-old", action: .hintOrder(orderID: "o-old")),
            at: Fixtures.t0.addingTimeInterval(-30 * 86_400))
        #expect(old == .accepted(wake: []))
        for _ in 0..<5 { #expect(await send(handler, "PUT", "/v1/sessions").status == 405) }
        #expect(try await store.summary(now: Fixtures.t0).rejectionsLastDay == 5)

        let policy = RetentionPolicy(rejections: .seconds(7 * 86_400), unknownNotifications: .seconds(7 * 86_400), unverifiedRowCap: 2)
        let pruner = Pruner(store: store, policy: policy, doneDirectory: nil, clock: clock)
        let service = RetentionService(pruner: pruner, interval: .seconds(3_600), capInterval: .seconds(60), logger: Logger(label: "test"))
        let running = Task { try await service.run() }
        try await waitUntil { clock.sleeperCount == 1 }
        clock.advance(by: .seconds(60))
        try await waitUntil { try await store.summary(now: clock.now).rejectionsLastDay == 2 }
        try await waitUntil { clock.sleeperCount == 1 }
        #expect(try await pruner.run(dryRun: true).unknownNotifications == 1, "a cap pass pruned by age")
        clock.advance(by: .seconds(3_540))
        try await waitUntil { try await pruner.run(dryRun: true).isEmpty }
        try await waitUntil { clock.sleeperCount == 1 }
        running.cancel()
        try await running.value
    }

    @Test("retention.unknown_notifications_days and retention.unverified_max_rows: defaults, 0, and check-config's lines")
    func settings() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try "pw".write(toFile: directory.path + "/pw", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: directory.path + "/credstore", withIntermediateDirectories: true)
        func load(_ retention: String) async throws -> Settings {
            let yaml =
                "klarna:\n  base_url: https://api.playground.klarna.com\n  username: K123_abc\n  password_file: pw\nstore:\n  path: state.sqlite\n"
                + retention
            try yaml.write(toFile: directory.path + "/config.yaml", atomically: true, encoding: .utf8)
            return try await Settings.load(configPath: directory.path + "/config.yaml", environment: [:], credstore: directory.path + "/credstore")
        }
        let defaults = try await load("")
        #expect(defaults.retention.rejections == .seconds(7 * 86_400))
        #expect(defaults.retention.unknownNotifications == .seconds(7 * 86_400))
        #expect(defaults.retention.unverifiedRowCap == 10_000)
        #expect(defaults.effectiveDescription.contains("retention.unknown_notifications_days: 7\n"))
        #expect(defaults.effectiveDescription.contains("retention.unverified_max_rows: 10000\n"))
        let off = try await load("retention:\n  unknown_notifications_days: 0\n  unverified_max_rows: 0\n")
        #expect(off.retention.unknownNotifications == nil && off.retention.unverifiedRowCap == nil)
        #expect(off.effectiveDescription.contains("retention.unverified_max_rows: 0 (no cap)"))
        do {
            _ = try await load("retention:\n  unverified_max_rows: -1\n")
            Issue.record("a negative cap was taken")
        } catch {
            #expect("\(error)".contains("retention.unverified_max_rows: must be between 0 and 100000000, not -1"), "\(error)")
        }
    }
}
