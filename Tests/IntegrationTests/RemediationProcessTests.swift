import Foundation
import Glibc
import KlarnaAPI
import KlarnaSandbox
import Logging
import ReconcilerCore
import ReconcilerStore
import Testing
import TestSupport

/// hold, release, retry, cancel and release-remaining on a daemon process: from the command line and over the
/// socket, with a real store and the sandbox as Klarna, including refusals and crashes between request and effect.
@Suite("Operator commands on a running daemon", .serialized)
struct RemediationProcessTests {
    /// A payment HPP completes at once (`PLACE_ORDER`: HPP places the order), tracked with `capture`.
    func placed(
        _ fixture: DaemonFixture, _ reference: String, capture: String = "on_request", amount: Int = 20_000
    ) async throws -> (hpp: String, order: String) {
        let created = try fixture.sandbox.createSession(
            SessionSpec(
                orderAmount: amount, merchantReference: reference, placeOrderMode: "PLACE_ORDER",
                schedule: [ScheduleStep(afterSeconds: 0.1, status: "COMPLETED")]))
        let tracked = try await fixture.cli([
            "track", created.hppSessionId, "--kp-session", created.kpSessionId, "--mode", "PLACE_ORDER", "--reference", reference, "--capture",
            capture,
        ])
        #expect(tracked.status == 0, "\(tracked.errors)")
        let store = try fixture.readStore()
        var order: TrackedOrder?
        try await waitUntil(timeout: .seconds(20)) {
            order = try await store.timeline(for: reference).orders.first
            return order.map { $0.phase == .awaitingCapture || !$0.isOpen } ?? false
        }
        return (created.hppSessionId, order!.orderID)
    }

    func order(_ fixture: DaemonFixture, _ id: String, until done: @escaping (TrackedOrder) -> Bool) async throws -> TrackedOrder {
        let store = try fixture.readStore()
        var found: TrackedOrder?
        try await waitUntil(timeout: .seconds(20)) {
            found = try await store.order(id)
            return found.map(done) ?? false
        }
        return found!
    }

    func events(_ fixture: DaemonFixture, _ id: String) async throws -> [RecordedEvent] {
        try await fixture.readStore().timeline(for: id).events
    }

    var me: String { "uid \(getuid())" }

    @Test("hold stops every Klarna call for the payment, webhooks included, until release; refusals say why")
    func holdAndRelease() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let held = try fixture.sandbox.createSession(SessionSpec(merchantReference: "held-1"))
        #expect(
            try await fixture.cli(["track", held.hppSessionId, "--kp-session", held.kpSessionId, "--reference", "held-1", "--capture", "on_request"])
                .status == 0)
        let reads = { fixture.sandbox.requests(route: "hpp.read_session").filter { $0.path.hasSuffix(held.hppSessionId) }.count }
        try await waitUntil { reads() > 0 }

        let hold = try await fixture.cli(["hold", "held-1"])
        #expect(hold.status == 0, "\(hold.errors)")
        #expect(hold.output.contains("session:\(held.hppSessionId): held"), "\(hold.output)")
        let before = reads()
        // The consumer completes and Klarna calls back: a held payment still makes no call.
        try fixture.sandbox.setHPPStatus(held.hppSessionId, "COMPLETED")
        let kp = held.kpSessionId
        let callback =
            "/v1/webhooks/hpp-status?kp_session_id=\(kp)&token=\(IngestSocketTests().token("hpp-status", kp))&hpp_session_id=\(held.hppSessionId)"
        #expect(
            try await fixture.post(callback, #"{"event_id":"ev-held","session":{"session_id":"\#(held.hppSessionId)","status":"COMPLETED"}}"#).status
                == 202)
        // Meanwhile another payment goes all the way: the daemon is working, just not on the held one.
        let other = try await placed(fixture, "other-1", capture: "immediate")
        _ = try await order(fixture, other.order) { $0.outcome == .captured }
        #expect(reads() == before, "a held session was read")
        #expect(fixture.sandbox.requests(route: "kp.read_session").allSatisfy { !$0.path.hasSuffix(kp) })

        let status = try await fixture.cli(["status"])
        #expect(status.output.contains("held:           1"), "\(status.output)")
        #expect(try await fixture.cli(["list", "--state", "held"]).output.contains(held.hppSessionId))
        #expect(try await fixture.cli(["show", "held-1"]).output.contains("HELD session:\(held.hppSessionId)"))
        let again = try await fixture.cli(["hold", "held-1"])
        #expect(again.status == 1 && again.errors.contains("already held"), "\(again.errors)")
        let unknown = try await fixture.cli(["hold", "no-such-payment"])
        #expect(unknown.status == 1 && unknown.errors.contains("nothing tracked matches no-such-payment"), "\(unknown.errors)")
        let retryHeld = try await fixture.cli(["retry", "held-1"])
        #expect(retryHeld.status == 1 && retryHeld.errors.contains("held"), "\(retryHeld.errors)")

        let release = try await fixture.cli(["release", "held-1"])
        #expect(release.status == 0, "\(release.errors)")
        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(20)) { try await store.timeline(for: "held-1").orders.first?.phase == .awaitingCapture }
        #expect(fixture.sandbox.effects(kind: .orderPlaced).filter { $0.kpSessionId == kp }.count == 1)
        let notHeld = try await fixture.cli(["release", "held-1"])
        #expect(notHeld.status == 1 && notHeld.errors.contains("not held"), "\(notHeld.errors)")

        // Who asked is on the timeline and in the journal's fields (REQUESTED_BY).
        let timeline = try await events(fixture, "held-1")
        #expect(
            timeline.contains {
                $0.kind == "operator" && $0.message.contains("held by \(me)") && $0.detail["requested_by"]?.contains("via the command line") == true
            })
        #expect(timeline.contains { $0.kind == "operator" && $0.message.contains("released by \(me)") })
        #expect(fixture.daemonLog.contains("held by \(me)"))
        try await fixture.kill9()
    }

    @Test("retry re-drives an order whose capture failed: it reads the order, then captures once under the same key; a fine payment is refused")
    func retryFailedCapture() async throws {
        let fixture = try await DaemonFixture()
        fixture.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .status, status: 400, errorCode: "BAD_VALUE"))
        try await fixture.start()
        let payment = try await placed(fixture, "retry-1", capture: "immediate")
        _ = try await order(fixture, payment.order) { $0.outcome == .needsAttention }
        #expect(fixture.sandbox.effects(kind: .captured).isEmpty)

        let retry = try await fixture.cli(["retry", "retry-1"])
        #expect(retry.status == 0, "\(retry.errors)")
        #expect(retry.output.contains("re-driven"), "\(retry.output)")
        let captured = try await order(fixture, payment.order) { $0.outcome == .captured }
        #expect(captured.capturedAmount == 20_000)
        let captures = fixture.sandbox.effects(kind: .captured)
        #expect(captures.count == 1)
        let keys = Set(fixture.sandbox.requests(route: "om.create_capture").compactMap(\.idempotencyKey))
        #expect(keys.count == 1, "the retried capture must reuse its key")

        let fine = try await fixture.cli(["retry", "retry-1"])
        #expect(fine.status == 1, "\(fine.output)")
        #expect(fine.errors.contains("nothing to retry: order \(payment.order) is captured"), "\(fine.errors)")
        try await fixture.kill9()
    }

    @Test("retry of a lost create-order answer reads Klarna and never places a second order; --order-id records the one Klarna placed")
    func retryLostOrder() async throws {
        let fixture = try await DaemonFixture()
        // The order is placed, the answer is lost; the KP session is then complete: needs_attention.
        fixture.sandbox.addFault(SandboxFault(route: "kp.create_order", kind: .reset, afterEffect: true))
        try await fixture.start()
        let created = try fixture.sandbox.createSession(
            SessionSpec(merchantReference: "lost-1", schedule: [ScheduleStep(afterSeconds: 0.1, status: "COMPLETED")]))
        #expect(
            try await fixture.cli([
                "track", created.hppSessionId, "--kp-session", created.kpSessionId, "--reference", "lost-1", "--capture", "immediate",
            ]).status == 0)
        let store = try fixture.readStore()
        try await waitUntil(timeout: .seconds(20)) { try await store.session(created.hppSessionId)?.outcome == .needsAttention }
        let placed = try #require(fixture.sandbox.effects(kind: .orderPlaced).first?.orderId)

        // Without the id: the daemon reads the KP session, finds it complete, and stops again (no second order).
        let blind = try await fixture.cli(["retry", "lost-1"])
        #expect(blind.status == 0, "\(blind.errors)")
        try await waitUntil(timeout: .seconds(20)) {
            try await store.timeline(for: "lost-1").outcomes.filter { $0.outcome.kind == .needsAttention }.count == 2
        }
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 1)

        let wrong = try await fixture.cli(["hold", "lost-1", "--wait", "1"])
        #expect(wrong.status == 1 && wrong.errors.contains("nothing to hold"), "\(wrong.errors)")
        let recorded = try await fixture.cli(["retry", "lost-1", "--order-id", placed])
        #expect(recorded.status == 0, "\(recorded.errors)")
        #expect(recorded.output.contains("order \(placed) recorded"), "\(recorded.output)")
        _ = try await order(fixture, placed) { $0.outcome == .captured }
        #expect(fixture.sandbox.effects(kind: .orderPlaced).count == 1)
        #expect(fixture.sandbox.effects(kind: .captured).count == 1)
        let intent = try #require(try await store.timeline(for: "lost-1").intents.first { $0.kind == .placeOrder })
        #expect(intent.state == .confirmed && intent.result == placed)
        try await fixture.kill9()
    }

    @Test("cancel an uncaptured order and release what a partial capture left; each refused where it does not apply")
    func cancelAndReleaseRemaining() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let uncaptured = try await placed(fixture, "cancel-1")
        let cancel = try await fixture.cli(["cancel", uncaptured.order])
        #expect(cancel.status == 0, "\(cancel.errors)")
        #expect(cancel.output.contains("order \(uncaptured.order) is now cancelled"), "\(cancel.output)")
        #expect(fixture.sandbox.effects(kind: .orderCancelled).map(\.orderId) == [uncaptured.order])
        let outcomes = try await fixture.readStore().timeline(for: "cancel-1").outcomes.map(\.outcome.kind)
        #expect(outcomes.last == .cancelled, "\(outcomes)")
        let twice = try await fixture.cli(["cancel", uncaptured.order])
        #expect(twice.status == 1 && twice.errors.contains("is cancelled"), "\(twice.errors)")

        let partial = try await placed(fixture, "partial-1")
        #expect(try await fixture.cli(["capture", partial.order, "--amount", "5000"]).status == 0)
        _ = try await order(fixture, partial.order) { $0.capturedAmount == 5_000 && $0.phase == .awaitingCapture }
        let refused = try await fixture.cli(["cancel", partial.order])
        #expect(refused.status == 1 && refused.errors.contains("has captures (5000 of 20000)"), "\(refused.errors)")
        let release = try await fixture.cli(["release-remaining", partial.order])
        #expect(release.status == 0, "\(release.errors)")
        let closed = try await order(fixture, partial.order) { !$0.isOpen }
        #expect(closed.outcome == .captured && closed.capturedAmount == 5_000 && closed.remainingAuthorizedAmount == 0)
        #expect(fixture.sandbox.effects(kind: .remainingReleased).map(\.amount) == [15_000])
        let last = try #require(try await fixture.readStore().timeline(for: "partial-1").outcomes.last?.outcome)
        #expect(last.kind == .captured && last.amount == 5_000 && last.reason.contains("released"), "\(last)")

        let full = try await placed(fixture, "full-1", capture: "immediate")
        _ = try await order(fixture, full.order) { $0.outcome == .captured }
        let cancelCaptured = try await fixture.cli(["cancel", full.order])
        #expect(cancelCaptured.status == 1 && cancelCaptured.errors.contains("has captures"), "\(cancelCaptured.errors)")
        let releaseCaptured = try await fixture.cli(["release-remaining", full.order])
        #expect(releaseCaptured.status == 1 && releaseCaptured.errors.contains("nothing left authorized"), "\(releaseCaptured.errors)")
        #expect(fixture.sandbox.effects(kind: .orderCancelled).count == 1)
        try await fixture.kill9()
    }

    @Test(
        "a cancel Klarna refuses ends needs_attention, never in the capture policy; asked again after the cause is gone, it reads first and cancels once"
    )
    func cancelRefused() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let payment = try await placed(fixture, "cancel-refused")
        fixture.sandbox.addFault(SandboxFault(route: "om.cancel_order", kind: .status, status: 400, errorCode: "BAD_VALUE"))
        let cancel = try await fixture.cli(["cancel", payment.order])
        #expect(cancel.status == 0, "\(cancel.errors)")
        let stuck = try await order(fixture, payment.order) { $0.outcome == .needsAttention }
        #expect(stuck.capturedAmount == 0)
        #expect(fixture.sandbox.effects(kind: .captured).isEmpty && fixture.sandbox.effects(kind: .orderCancelled).isEmpty)
        let again = try await fixture.cli(["cancel", payment.order])
        #expect(again.status == 0, "\(again.errors)")
        _ = try await order(fixture, payment.order) { $0.outcome == .cancelled }
        #expect(fixture.sandbox.effects(kind: .orderCancelled).count == 1)
        try await fixture.kill9()
    }

    @Test("release reads Klarna before a capture that waited for its next attempt: captured meanwhile at Klarna, it is not captured again")
    func releaseReadsFirst() async throws {
        let fixture = try await DaemonFixture()
        let config = try String(contentsOfFile: fixture.configPath, encoding: .utf8)
        try config.replacingOccurrences(of: "  max_delay_seconds: 2\n", with: "  max_delay_seconds: 2\n  max_attempts: 100\n")
            .write(toFile: fixture.configPath, atomically: true, encoding: .utf8)
        // Every capture attempt is answered 429: known not to have happened, the capture intent stays `intended` and
        // waits for its next attempt (a 5xx would leave it unclear, which is read first anyway).
        fixture.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .rateLimit, resetSeconds: 1, count: nil))
        try await fixture.start()
        let created = try fixture.sandbox.createSession(
            SessionSpec(
                merchantReference: "release-1", placeOrderMode: "PLACE_ORDER", schedule: [ScheduleStep(afterSeconds: 0.1, status: "COMPLETED")]))
        #expect(
            try await fixture.cli([
                "track", created.hppSessionId, "--kp-session", created.kpSessionId, "--mode", "PLACE_ORDER", "--reference", "release-1", "--capture",
                "immediate",
            ]).status == 0)
        try await waitUntil(timeout: .seconds(20)) { fixture.sandbox.requests(route: "om.create_capture").count >= 2 }
        let payment = (
            hpp: created.hppSessionId,
            order: try #require(
                fixture.sandbox.requests(route: "om.create_capture").first?.path.split(separator: "/").dropLast().last.map(String.init))
        )
        let hold = try await fixture.cli(["hold", "release-1"])
        #expect(hold.status == 0, "\(hold.output) \(hold.errors)")
        fixture.sandbox.clearFaults()
        // Someone captures it by hand at Klarna while the payment is held.
        let transport = CurlTransport(configuration: .init(requestTimeout: .seconds(10)))
        defer { transport.shutdown() }
        let client = KlarnaClient(
            configuration: KlarnaConfiguration(
                baseURL: fixture.sandboxURL, credentials: BasicCredentials(username: "merchant", password: "daemon-secret")),
            transport: transport, logger: Logger(label: "test.portal"))
        let remaining = try #require(try await client.readOrder(id: payment.order).remainingAuthorizedAmount)
        _ = try await client.createCapture(
            orderID: payment.order, request: CaptureRequest(capturedAmount: remaining), idempotencyKey: UUID().uuidString)
        let attemptsBefore = fixture.sandbox.requests(route: "om.create_capture").count
        #expect(try await fixture.cli(["release", "release-1"]).status == 0)
        let done = try await order(fixture, payment.order) { !$0.isOpen }
        #expect(done.outcome == .captured)
        #expect(fixture.sandbox.effects(kind: .captured).count == 1, "captured twice")
        #expect(fixture.sandbox.requests(route: "om.create_capture").count == attemptsBefore, "the daemon sent the capture again")
        try await fixture.kill9()
    }

    @Test(
        "the operators' socket: 200 when applied, 404 for an unknown id, 409 with the reason, who asked by uid; status, list and show as JSON; none of it on the ingest socket"
    )
    func socketRoutes() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let payment = try await placed(fixture, "sock-op-1")
        func control(_ target: String, _ body: String = "", method: String = "POST") async throws -> (status: Int, body: String) {
            try await fixture.post(target, body, method: method, socket: fixture.controlPath)
        }
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: fixture.controlPath)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o660)
        #expect(try await fixture.post("/v2/payments/sock-op-1/hold", "").status == 404, "operator routes on the ingest socket")
        let hold = try await control("/v2/payments/sock-op-1/hold")
        #expect(hold.status == 200, "\(hold.body)")
        #expect(hold.body.contains(#""status":"done""#) && hold.body.contains("order:\(payment.order)"), "\(hold.body)")
        #expect(try await control("/v2/payments/sock-op-1/hold").status == 409)
        let unknown = try await control("/v2/payments/nobody/hold")
        #expect(unknown.status == 404 && unknown.body.contains("unknown_payment"), "\(unknown.body)")
        #expect(try await control("/v2/payments/sock-op-1/explode").status == 404)
        #expect(try await control("/v2/payments/sock-op-1/retry", "not json").status == 400)
        let cancelHeld = try await control("/v2/payments/\(payment.order)/cancel")
        #expect(cancelHeld.status == 409 && cancelHeld.body.contains("held"), "\(cancelHeld.body)")

        let status = try await control("/v2/status", method: "GET")
        #expect(status.status == 200 && status.body.contains(#""held":1"#), "\(status.body)")
        let listing = try await control("/v2/payments?state=held", method: "GET")
        #expect(listing.status == 200 && listing.body.contains(payment.order), "\(listing.body)")
        let story = try await control("/v2/payments/sock-op-1", method: "GET")
        #expect(story.status == 200 && story.body.contains("order:\(payment.order)"), "\(story.body)")
        #expect(try await control("/v2/payments/nobody", method: "GET").status == 404)

        // One JSON convention: what `--json` prints is the socket's /v2 document (show adds the settlement lines);
        // /v1 still answers, with the types' camelCase keys, for clients written against it.
        func document(_ text: String) throws -> NSDictionary {
            try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? NSDictionary, "not a JSON object: \(text.prefix(300))")
        }
        let socketList = try await control("/v2/payments", method: "GET")
        let cliList = try await fixture.cli(["list", "--json"])
        #expect(try document(socketList.body) == document(cliList.output), "\(socketList.body)\n\(cliList.output)")
        let cliShow = try document(try await fixture.cli(["show", "sock-op-1", "--json"]).output).mutableCopy() as! NSMutableDictionary
        #expect(cliShow["settlement_lines"] != nil)
        cliShow.removeObject(forKey: "settlement_lines")
        #expect(try document(story.body) == cliShow, "\(story.body)\n\(cliShow)")
        #expect(story.body.contains(#""hpp_session_id""#) && !story.body.contains("hppSessionID"), "\(story.body)")
        let legacy = try await control("/v1/payments/sock-op-1", method: "GET")
        #expect(legacy.status == 200 && legacy.body.contains("hppSessionID"), "\(legacy.body)")

        #expect(try await control("/v2/payments/sock-op-1/release").status == 200)
        let retryFine = try await control("/v2/payments/sock-op-1/retry")
        #expect(retryFine.status == 409 && retryFine.body.contains("nothing to retry"), "\(retryFine.body)")
        let cancel = try await control("/v2/payments/\(payment.order)/cancel", "{}")
        #expect(cancel.status == 200, "\(cancel.body)")
        _ = try await order(fixture, payment.order) { $0.outcome == .cancelled }
        let timeline = try await events(fixture, "sock-op-1")
        #expect(
            timeline.contains { $0.kind == "operator" && $0.message.contains("held by \(me)") && $0.message.contains("via the control socket") },
            "\(timeline.map(\.message))")
        try await fixture.kill9()
    }

    @Test(
        "a request made while the daemon is down waits in the store (exit 75) and is applied once it starts; a kill -9 during the cancel call leaves one cancel"
    )
    func crashBetweenRequestAndEffect() async throws {
        let fixture = try await DaemonFixture()
        try await fixture.start()
        let first = try await placed(fixture, "crash-1")
        let second = try await placed(fixture, "crash-2")
        try await fixture.kill9()

        let queued = try await fixture.cli(["cancel", first.order, "--wait", "1"])
        #expect(queued.status == 75, "\(queued.output) \(queued.errors)")
        #expect(queued.errors.contains("did not answer"), "\(queued.errors)")
        try await fixture.start()
        _ = try await order(fixture, first.order) { $0.outcome == .cancelled }
        #expect(fixture.sandbox.effects(kind: .orderCancelled).map(\.orderId) == [first.order])

        // Klarna cancels, but the answer is slow; the daemon dies while it waits. Its intent is `sent`: the next
        // start reads the order, sees it cancelled, and never sends again.
        fixture.sandbox.addFault(SandboxFault(route: "om.cancel_order", kind: .delay, delayMs: 30_000, afterEffect: true))
        let slow = try await fixture.cli(["cancel", second.order, "--wait", "0"])
        #expect(slow.status == 75 || slow.status == 0, "\(slow.errors)")
        try await waitUntil(timeout: .seconds(20)) { fixture.sandbox.effects(kind: .orderCancelled).count == 2 }
        try await fixture.kill9()
        let cancelCalls = fixture.sandbox.requests(route: "om.cancel_order").count
        try await fixture.start()
        let cancelled = try await order(fixture, second.order) { $0.outcome == .cancelled }
        #expect(cancelled.activeIntent == nil)
        #expect(fixture.sandbox.effects(kind: .orderCancelled).count == 2)
        #expect(fixture.sandbox.requests(route: "om.cancel_order").count == cancelCalls, "the restarted daemon sent the cancel again")
        let resolved = try await events(fixture, "crash-2")
        #expect(resolved.contains { $0.kind == "resolved" && $0.message.contains("was done") }, "\(resolved.map(\.message))")
        try await fixture.kill9()
    }
}
