import Foundation
import KlarnaSandbox
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore

@Suite("Engine against the sandbox: modes and capture policies")
struct EngineModeTests {
    let completesSoon = [ScheduleStep(afterSeconds: 5, status: "IN_PROGRESS"), ScheduleStep(afterSeconds: 30, status: "COMPLETED")]

    @Test("NONE + immediate: one order placed, one full capture, outcomes order_placed then captured")
    func noneImmediate() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 12_345, merchantReference: "shop-1", schedule: completesSoon))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            let order = try await h.order(of: created)
            #expect(order.phase == .closed && order.capturedAmount == 12_345 && order.merchantReference == "shop-1")
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).count == 1)
            #expect(h.effects(.captured, order: order.orderID).map(\.amount) == [12_345])
            #expect(try await h.session(created).phase == .ordered)
            let intents = try await h.store.timeline(for: created.hppSessionId).intents
            #expect(intents.map(\.state) == [.confirmed, .confirmed])
            // The capture went out with the key the intent recorded, derived from the order.
            #expect(h.effects(.captured).first?.idempotencyKey == IdempotencyKey.make(.capture, "\(order.orderID):full"))
            h.expectNoDoubleEffects()
        }
    }

    @Test("Each step plans the next run from the state it committed: the plan a read of the store gives, with the unit read once per step")
    func planFromCommitted() async throws {
        try await EngineHarness.withFaultyStore { h, counting in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: completesSoon), capture: .onRequest)
            // A read that finds the session in progress (a next read planned), then one that places the order.
            var planned = 0
            for seconds in [6, 31] {
                h.clock.advance(by: .seconds(seconds))
                counting.unitReads.withLock { $0 = 0 }
                let result = try await h.reconciler.process(.session(created.hppSessionId))
                #expect(counting.unitReads.withLock { $0 } == 1)
                guard let next = result.next else { continue }
                let plan = try #require(try await h.session(created).plan(now: h.clock.now))
                #expect(next.urgency == plan.urgency)
                #expect(next.poll == plan.poll)
                planned += 1
            }
            #expect(planned >= 1)
            #expect(h.effects(.orderPlaced, kp: created.kpSessionId).count == 1)
        }
    }

    @Test("NONE + on_request: waits, then captures each request, partial then the rest")
    func noneOnRequest() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 10_000, schedule: completesSoon), capture: .onRequest)
            try await h.run()
            var order = try await h.order(of: created)
            #expect(order.phase == .awaitingCapture)
            #expect(h.effects(.captured).isEmpty)
            #expect(try await h.store.requestCapture(orderID: order.orderID, amount: 2_500, at: h.clock.now) == .accepted(id: 1))
            // The daemon's wakeup poller hands the order to a worker as hinted.
            _ = try await h.reconciler.process(.order(order.orderID), hinted: true)
            try await h.run()
            order = try await h.order(of: created)
            #expect(order.capturedAmount == 2_500)
            #expect(order.phase == .awaitingCapture)
            _ = try await h.store.requestCapture(orderID: order.orderID, amount: nil, at: h.clock.now)
            _ = try await h.reconciler.process(.order(order.orderID), hinted: true)
            try await h.run()
            order = try await h.order(of: created)
            #expect(order.phase == .closed && order.capturedAmount == 10_000)
            #expect(h.effects(.captured, order: order.orderID).map(\.amount) == [2_500, 7_500])
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured, .captured])
            h.expectNoDoubleEffects(capturesPerOrder: 2)
        }
    }

    @Test("A capture request above the remaining amount is refused with a reason; nothing is captured")
    func overCaptureRefused() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 1_000, schedule: completesSoon), capture: .onRequest)
            try await h.run()
            let order = try await h.order(of: created)
            _ = try await h.store.requestCapture(orderID: order.orderID, amount: 5_000, at: h.clock.now)
            _ = try await h.reconciler.process(.order(order.orderID), hinted: true)
            try await h.run()
            #expect(h.effects(.captured).isEmpty)
            #expect(try await h.store.oldestCaptureRequest(orderID: order.orderID) == nil)
            let events = try await h.store.timeline(for: order.orderID).events
            #expect(events.contains { $0.kind == "capture_refused" && $0.message.contains("1000 remains") })
        }
    }

    @Test("NONE + never: order placed, never captured")
    func noneNever() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: completesSoon), capture: .never)
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced])
            #expect(try await h.order(of: created).phase == .closed)
            #expect(h.effects(.captured).isEmpty)
            #expect(h.sandbox.requests(route: "om.create_capture").isEmpty)
        }
    }

    @Test("PLACE_ORDER: HPP places the order; the daemon only captures")
    func placeOrderMode() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(orderAmount: 5_000, schedule: completesSoon), mode: .placeOrder)
            try await h.run()
            #expect(h.sandbox.requests(route: "kp.create_order").isEmpty)
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            let order = try await h.order(of: created)
            #expect(order.placedBy == .placeOrder)
            #expect(h.effects(.captured, order: order.orderID).count == 1)
        }
    }

    @Test("CAPTURE_ORDER: HPP captured; no capture call is made")
    func captureOrderMode() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: completesSoon), mode: .captureOrder)
            try await h.run()
            #expect(h.sandbox.requests(route: "kp.create_order").isEmpty)
            #expect(h.sandbox.requests(route: "om.create_capture").isEmpty)
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
        }
    }

    @Test("Mode unknown at tracking: inferred from what HPP returns")
    func inferredMode() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(placeOrderMode: "PLACE_ORDER", schedule: completesSoon), mode: nil)
            try await h.run()
            #expect(try await h.session(created).mode == .placeOrder)
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
        }
    }

    @Test("Cancelled and disabled sessions end as cancelled with nothing placed", arguments: ["CANCELLED", "DISABLED"])
    func cancelled(status: String) async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 40, status: status)]))
            try await h.run()
            #expect(try await h.outcomes(created) == [.cancelled])
            #expect(h.sandbox.effects().isEmpty)
        }
    }

    @Test("PENDING then ACCEPTED: never captured while pending, captured after")
    func pendingThenAccepted() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(fraudStatus: "PENDING", fraudDecisionAfterSeconds: 600, fraudDecision: "ACCEPTED", schedule: completesSoon))
            try await h.run(for: .seconds(300))
            let pending = try await h.order(of: created)
            #expect(pending.phase == .pendingFraud)
            #expect(h.sandbox.requests(route: "om.create_capture").isEmpty)
            try await h.run(for: .seconds(3_600))
            #expect(try await h.outcomes(created) == [.orderPlaced, .captured])
            let placed = try await h.store.timeline(for: created.hppSessionId).outcomes.first
            #expect(placed?.outcome.fraudStatus == "PENDING")
            // Every capture request came after Klarna's decision.
            let decision = try #require(h.sandbox.requests(route: "om.read_order").first { _ in true }?.at).addingTimeInterval(600)
            #expect(h.sandbox.requests(route: "om.create_capture").allSatisfy { $0.at >= decision.addingTimeInterval(-60) })
        }
    }

    @Test("PENDING then REJECTED: outcome rejected, no capture")
    func pendingThenRejected() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(
                SessionSpec(fraudStatus: "PENDING", fraudDecisionAfterSeconds: 120, fraudDecision: "REJECTED", schedule: completesSoon))
            try await h.run()
            #expect(try await h.outcomes(created) == [.orderPlaced, .rejected])
            #expect(h.sandbox.requests(route: "om.create_capture").isEmpty)
        }
    }

    @Test("tokenize: one customer token, no order; buy_and_tokenize: token, order and capture")
    func tokenize() async throws {
        try await EngineHarness.with { h in
            let token = try await h.track(SessionSpec(schedule: completesSoon), purpose: .tokenize)
            let both = try await h.track(SessionSpec(schedule: completesSoon), purpose: .buyAndTokenize)
            try await h.run()
            #expect(try await h.outcomes(token) == [.customerTokenCreated])
            #expect(try await h.session(token).phase == .closed)
            #expect(try await h.session(token).customerTokenID != nil)
            #expect(h.effects(.orderPlaced, kp: token.kpSessionId).isEmpty)
            #expect(try await h.outcomes(both) == [.customerTokenCreated, .orderPlaced, .captured])
            h.expectNoDoubleEffects()
        }
    }

    @Test("An HPP session Klarna does not know needs attention; one that expires unpaid is expired")
    func notFoundAndExpired() async throws {
        try await EngineHarness.with { h in
            let unknown = TrackedSession(
                hppSessionID: "no-such-session", kpSessionID: "kp", mode: ReconcilerCore.PlaceOrderMode.none, merchantReference: nil,
                capturePolicy: .immediate, purpose: .buy, trackedAt: h.clock.now)
            _ = try await h.store.track(unknown, event: DomainEvent(.tracked, "t"), at: h.clock.now)
            let abandoned = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 10, status: "IN_PROGRESS")]))
            try await h.run(for: .seconds(60))
            #expect(try await h.store.timeline(for: "no-such-session").outcomes.map(\.outcome.kind) == [.needsAttention])
            #expect(try await h.session(abandoned).hppStatus?.rawValue == "IN_PROGRESS")
            // Klarna expires it early (the consumer's KP session ran out): the next read is a 404.
            try h.sandbox.expire(.hppSession, id: abandoned.hppSessionId)
            try await h.run(for: .seconds(60))
            #expect(try await h.outcomes(abandoned) == [.expired])
        }
    }

    @Test("An abandoned session is polled sparsely and ends at its expiry with outcome expired")
    func abandonedUntilExpiry() async throws {
        try await EngineHarness.with { h in
            let created = try await h.track(SessionSpec(schedule: [ScheduleStep(afterSeconds: 10, status: "IN_PROGRESS")]))
            try await h.run(for: .seconds(48 * 3_600))
            #expect(try await h.outcomes(created) == [.expired])
            // Dense for ten minutes, then at most every five minutes until expiry 47 h later: a few hundred reads,
            // not tens of thousands.
            let reads = h.sandbox.requests(route: "hpp.read_session").count
            #expect(reads > 300 && reads < 900, "\(reads) reads")
        }
    }
}

@Suite("Engine: Klarna Network payment requests")
struct PaymentRequestTests {
    func hint(_ h: EngineHarness, _ id: String) async throws {
        let record = IngestRecord(
            dedupeKey: "kn-event:\(UUID())", kind: "klarna_network", source: "test", summary: "signed webhook",
            action: .hintPaymentRequest(TrackedPaymentRequest(paymentRequestID: id, trackedAt: h.clock.now)))
        _ = try await h.store.ingest(record, at: h.clock.now)
    }

    @Test("A verified webhook starts following the request; COMPLETED yields an outcome with the session token, read from Klarna")
    func completed() async throws {
        try await EngineHarness.with { h in
            let id = h.sandbox.createPaymentRequest(state: "IN_PROGRESS")
            try await hint(h, id)
            try await h.run(for: .seconds(60))
            #expect(try await h.store.paymentRequest(id)?.state == .inProgress)
            #expect(try await h.store.paymentRequest(id)?.isOpen == true)
            try h.sandbox.setPaymentRequestState(id, "COMPLETED")
            try await hint(h, id)
            try await h.run(for: .seconds(60))
            let request = try #require(try await h.store.paymentRequest(id))
            #expect(request.outcome == .paymentRequestCompleted)
            let outcome = try #require(try await h.store.undeliveredOutcomes(now: h.clock.now, limit: 10).first?.outcome)
            #expect(outcome.kind == .paymentRequestCompleted)
            #expect(outcome.paymentRequestID == id)
            let token = try #require(outcome.klarnaNetworkSessionToken)
            #expect(token.hasPrefix("krn:network:eu1:session-token:"))
            // The token goes to the outbox for the acquiring partner, never to the logs.
            #expect(!h.logs.all.joined().contains(token))
            #expect(h.sandbox.requests(route: "kn.read_payment_request").count >= 2)
        }
    }

    @Test(
        "Declined, canceled and unknown payment requests end with their outcome",
        arguments: [("DECLINED", OutcomeKind.rejected), ("CANCELED", .cancelled)])
    func ended(state: String, kind: OutcomeKind) async throws {
        try await EngineHarness.with { h in
            let id = h.sandbox.createPaymentRequest(state: state)
            try await hint(h, id)
            try await hint(h, "krn:payment:eu1:request:unknown")
            try await h.run(for: .seconds(60))
            #expect(try await h.store.paymentRequest(id)?.outcome == kind)
            #expect(try await h.store.paymentRequest("krn:payment:eu1:request:unknown")?.outcome == .expired)
        }
    }
}
