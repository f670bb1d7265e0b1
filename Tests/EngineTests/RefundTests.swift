import Foundation
import KlarnaAPI
import KlarnaSandbox
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore
@testable import SQLiteBackend

/// Refunds as intents, against the sandbox over real sockets with a real store (each test on SQLite and on
/// PostgreSQL): each refund is made once at Klarna whatever fails, with one idempotency key; what Klarna would refuse
/// is refused before sending. One at a time: the rest of the suite runs beside it on the same two cores.
@Suite("Refunds", .serialized)
struct RefundTests {
    static let completesSoon = [ScheduleStep(afterSeconds: 5, status: "COMPLETED")]

    @Test(
        "A refund is made once under 5xx, a reset or a timeout, before or after Klarna acts: one refund at Klarna, one key, outcome refunded with its id, in the ledger as the daemon's",
        arguments: StoreKind.allCases,
        [
            ("503 before", SandboxFault.Kind.status, Int?(503), false), ("500 after", .status, 500, true), ("reset after", .reset, nil, true),
            ("timeout after", .delay, nil, true), ("429", .rateLimit, nil, false),
        ])
    func refundOnceUnderFaults(store: StoreKind, fault: (name: String, kind: SandboxFault.Kind, status: Int?, afterEffect: Bool)) async throws {
        let (name, kind, status, afterEffect) = fault
        // A 2 s client timeout against the 2.5 s delay; a patient client otherwise, so that a late answer on loaded
        // cores is not taken for a timeout.
        try await EngineHarness.with(store: store, requestTimeout: kind == .delay ? .seconds(2) : .seconds(10)) { h in
            let orderID = try await h.capturedOrder(10_000)
            h.sandbox.addFault(
                SandboxFault(
                    route: "om.create_refund", kind: kind, status: status, delayMs: 2_500, resetSeconds: 5, afterEffect: afterEffect, count: 1))
            #expect(try await h.askRefund(orderID, 2_500, reference: "rma-1") == .accepted(wake: [.order(orderID)]))
            try await h.run()
            let refunds = h.effects(.refunded, order: orderID)
            #expect(refunds.map(\.amount) == [2_500], "\(name)")
            let requests = h.sandbox.requests(route: "om.create_refund")
            let events = try await h.store.timeline(for: orderID).events
            if afterEffect {
                // Made, answer lost: the read before the next attempt finds it by its reference, and nothing is sent
                // again. (A timed-out attempt may still be on its way when the read comes: then the read shows no
                // refund, and the second attempt, with the same key, gets Klarna's answer to the first.)
                #expect(events.contains { $0.kind == "ambiguous" }, "\(name)")
                if requests.count == 1 {
                    #expect(events.contains { $0.kind == "resolved" && $0.message.contains("it was made") }, "\(name)")
                } else {
                    #expect(kind == .delay && requests.count == 2, "\(name): \(requests.count) requests")
                }
            } else {
                #expect(requests.count == 2, "\(name): one refused attempt, then one that went through")
                #expect(requests.contains { $0.fault != nil }, "the fault fired")
            }
            #expect(Set(requests.map(\.idempotencyKey)).count == 1)
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refunded])
            #expect(outcomes.first?.refundID == refunds.first?.refundId)
            #expect(outcomes.first?.refundReference == "rma-1")
            let ledger = try #require(try await h.store.ledger(orderIDs: [orderID], account: .default)[orderID])
            #expect(ledger.refunds.map(\.refundID) == [refunds.first?.refundId])
            #expect(ledger.refunds.map(\.source) == [.daemon])
            let intent = try #require(try await h.store.intents(subject: orderID).first { $0.kind == .refund })
            #expect(intent.state == .confirmed && intent.result == refunds.first?.refundId)
        }
    }

    @Test(
        "The read before a refund fails (503, then a timeout): it is tried again with a growing wait, the refund then made once; an order Klarna does not know (404) ends the refund as refund_failed, nothing sent",
        arguments: StoreKind.allCases)
    func readBeforeRefundFails(store: StoreKind) async throws {
        try await EngineHarness.with(store: store, requestTimeout: .seconds(2)) { h in
            let orderID = try await h.capturedOrder(8_000)
            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .status, status: 503, count: 1))
            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .delay, delayMs: 2_500, count: 1))
            _ = try await h.askRefund(orderID, 1_500, reference: "slow-read")
            _ = try await h.reconciler.process(.order(orderID))
            let first = try #require(try await h.store.intents(subject: orderID).first { $0.kind == .refund })
            #expect(first.readFailures == 1 && first.state == .intended && h.sandbox.requests(route: "om.create_refund").isEmpty)
            try await h.run()
            #expect(h.effects(.refunded, order: orderID).map(\.amount) == [1_500])
            #expect(h.sandbox.requests(route: "om.create_refund").count == 1)
            let events = try await h.store.timeline(for: orderID).events
            #expect(events.filter { $0.kind == "read_failed" && $0.message.contains("before refunding") }.count == 2)

            h.sandbox.addFault(SandboxFault(route: "om.read_order", kind: .status, status: 404, count: 1))
            _ = try await h.askRefund(orderID, 500, reference: "gone")
            try await h.run()
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refunded, .refundFailed])
            #expect(outcomes.last?.reason.contains("Klarna does not know order") == true, "\(outcomes.last?.reason ?? "")")
            #expect(h.sandbox.requests(route: "om.create_refund").count == 1, "nothing sent for the order Klarna does not know")
        }
    }

    @Test(
        "A refund of more than captured minus refunded is refused from a read of the order, never sent; one within it is made",
        arguments: StoreKind.allCases)
    func refusedAmounts(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(10_000)
            _ = try await h.askRefund(orderID, 6_000, reference: "r-1")
            _ = try await h.askRefund(orderID, 5_000, reference: "r-2")
            _ = try await h.askRefund(orderID, 4_000, reference: "r-3")
            try await h.run()
            #expect(h.effects(.refunded, order: orderID).map(\.amount) == [6_000, 4_000])
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refunded, .refundFailed, .refunded])
            #expect(outcomes[1].reason.contains("captured 10000 minus refunded 6000 is 4000"), "\(outcomes[1].reason)")
            #expect(outcomes[1].refundReference == "r-2")
            #expect(h.sandbox.requests(route: "om.create_refund").count == 2)
        }
    }

    @Test(
        "The same reference twice is one refund; with another amount it is refused (409); an unknown order is refused (404); nothing recorded for either",
        arguments: StoreKind.allCases)
    func sameReferenceTwice(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(8_000)
            #expect(try await h.askRefund(orderID, 1_000, reference: "same") == .accepted(wake: [.order(orderID)]))
            guard case .repeated = try await h.askRefund(orderID, 1_000, reference: "same") else {
                Issue.record("a repeat is not answered as one")
                return
            }
            guard case .refused(409, "reference_conflict", let detail) = try await h.askRefund(orderID, 2_000, reference: "same") else {
                Issue.record("another amount under one reference is not refused")
                return
            }
            #expect(detail.contains("already names a refund of 1000"))
            guard case .refused(404, "unknown_order", _) = try await h.askRefund("no-such-order", 1_000, reference: "x") else {
                Issue.record("an unknown order is not refused")
                return
            }
            try await h.run()
            #expect(try await h.askRefund(orderID, 1_000, reference: "same") != .accepted(wake: [.order(orderID)]))
            try await h.run()
            #expect(h.effects(.refunded, order: orderID).map(\.amount) == [1_000])
            #expect(try await h.store.intents(subject: orderID).filter { $0.kind == .refund }.count == 1)
        }
    }

    @Test("Klarna's 403 is not repeated: refund_failed with Klarna's words, one request", arguments: StoreKind.allCases)
    func klarnaRefuses(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.capturedOrder(5_000)
            h.sandbox.addFault(SandboxFault(route: "om.create_refund", kind: .status, status: 403, count: 1))
            _ = try await h.askRefund(orderID, 1_000, reference: "no")
            try await h.run()
            #expect(h.effects(.refunded, order: orderID).isEmpty)
            #expect(h.sandbox.requests(route: "om.create_refund").count == 1)
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refundFailed])
            #expect(outcomes.first?.reason.contains("HTTP 403") == true, "\(outcomes.first?.reason ?? "")")
        }
    }

    @Test(
        "A refund that never gets a clear answer ends refund_failed after retry.max_attempts, saying it may have been made, the same key every time",
        arguments: StoreKind.allCases)
    func neverAnswers(store: StoreKind) async throws {
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxAttempts = 3
        try await EngineHarness.with(store: store, settings: settings) { h in
            let orderID = try await h.capturedOrder(5_000)
            h.sandbox.addFault(SandboxFault(route: "om.create_refund", kind: .status, status: 503, count: nil))
            _ = try await h.askRefund(orderID, 1_000, reference: "lost")
            try await h.run()
            let requests = h.sandbox.requests(route: "om.create_refund")
            #expect(requests.count == 3)
            #expect(Set(requests.map(\.idempotencyKey)).count == 1)
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refundFailed])
            #expect(outcomes.first?.reason.contains("lists no refund with reference lost: not made") == true, "\(outcomes.first?.reason ?? "")")
            #expect(try await h.store.openWork().isEmpty, "nothing keeps coming back")
            // The last attempt's answer was awaited for the longest call before the read that ended it.
            let events = try await h.store.timeline(for: orderID).events
            #expect(events.contains { $0.kind == "ambiguous" && $0.message.contains("reading the order once more") })
        }
    }

    @Test(
        "A crash right after the last attempt's sent mark: nothing is concluded until that attempt cannot still arrive (the longest call), then a read that lists no refund ends it as not made, and nothing is sent",
        arguments: StoreKind.allCases)
    func crashAfterTheLastSentMark(store: StoreKind) async throws {
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxAttempts = 1
        try await EngineHarness.with(store: store, settings: settings) { h in
            let orderID = try await h.capturedOrder(5_000)
            _ = try await h.askRefund(orderID, 1_000, reference: "crash")
            // As the daemon leaves it when it dies after the sent mark of its only attempt, before the request left.
            let asked = try #require(try await h.store.intents(subject: orderID).first { $0.kind == .refund })
            var change = Change()
            change.intents = [asked.sending(now: h.clock.now)]
            try await h.store.commit(change, at: h.clock.now)

            let first = try await h.reconciler.process(.order(orderID))
            #expect(try await h.refundOutcomes(orderID).isEmpty, "not concluded while the attempt may be on its way")
            let wait = try #require(first.next?.due)
            #expect(abs(wait.timeIntervalSince(h.clock.now) - h.reconciler.settings.longestCall.timeInterval) < 1)
            h.clock.advance(by: Duration(timeInterval: wait.timeIntervalSince(h.clock.now)))
            _ = try await h.reconciler.process(.order(orderID))
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refundFailed])
            #expect(outcomes.first?.reason.contains("not made") == true, "\(outcomes.first?.reason ?? "")")
            #expect(h.sandbox.requests(route: "om.create_refund").isEmpty)
        }
    }

    @Test("An order with nothing captured (on_request, no capture asked) is not refunded: refund_failed, nothing sent", arguments: StoreKind.allCases)
    func nothingCaptured(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let created = try await h.track(SessionSpec(orderAmount: 3_000, schedule: Self.completesSoon), capture: .onRequest)
            try await h.run()
            let orderID = try await h.order(of: created).orderID
            _ = try await h.askRefund(orderID, 1_000, reference: "early")
            try await h.run()
            #expect(h.sandbox.requests(route: "om.create_refund").isEmpty)
            let outcomes = try await h.refundOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.refundFailed])
            #expect(outcomes.first?.reason.contains("nothing captured") == true)
            #expect(try await h.order(of: created).isOpen, "the order itself goes on waiting for its capture")
        }
    }

    @Test(
        "Operators: a hold stops a refund of a captured order until it is released; a failed refund is final, retry leaves it (a new reference asks again)",
        arguments: StoreKind.allCases)
    func holdAndRetry(store: StoreKind) async throws {
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxAttempts = 2
        try await EngineHarness.with(store: store, settings: settings) { h in
            let orderID = try await h.capturedOrder(9_000)
            func ask(_ action: OperatorAction) async throws {
                _ = try await h.store.submit(
                    [OperatorRequest(key: .order(orderID), action: action, requestedBy: "uid 1000 (alice)", requestedAt: h.clock.now)],
                    delivered: true,
                    at: h.clock.now)
                _ = try await h.reconciler.process(.order(orderID), hinted: true)
            }
            let payment = try await h.store.payment(orderID)
            #expect(
                Remediation.targets(.hold, payment: payment, now: h.clock.now)
                    == .failure(RemediationRefusal("nothing to hold: order \(orderID) is captured")))

            _ = try await h.askRefund(orderID, 1_000, reference: "held")
            #expect(try Remediation.targets(.hold, payment: await h.store.payment(orderID), now: h.clock.now) == .success([.order(orderID)]))
            try await ask(.hold)
            // (The harness's run would spin on a held key, which the scheduler drops; one step shows it.)
            #expect(try await h.reconciler.process(.order(orderID)).next == nil)
            #expect(h.sandbox.requests(route: "om.create_refund").isEmpty, "a held order makes no call")
            try await ask(.release)
            try await h.run()
            #expect(h.effects(.refunded, order: orderID).map(\.amount) == [1_000])

            // A refund that failed is final: `retry` does not re-drive it (the shop asks again under a new reference,
            // and a retried old one could meet that one).
            h.sandbox.addFault(SandboxFault(route: "om.create_refund", kind: .status, status: 503, count: nil))
            _ = try await h.askRefund(orderID, 2_000, reference: "unclear")
            try await h.run()
            #expect(try await h.refundOutcomes(orderID).map(\.kind) == [.refunded, .refundFailed])
            #expect(
                Remediation.targets(.retry, payment: try await h.store.payment(orderID), now: h.clock.now)
                    == .failure(RemediationRefusal("nothing to retry: order \(orderID) is captured")))
        }
    }

    @Test(
        "A refund asked for while the order's own capture waits to retry waits behind it (the step does not come back at once), then is made once the capture is",
        arguments: StoreKind.allCases)
    func behindTheOrdersCapture(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let created = try await h.track(SessionSpec(orderAmount: 6_000, schedule: Self.completesSoon), capture: .onRequest)
            try await h.run()
            let orderID = try await h.order(of: created).orderID
            h.sandbox.addFault(SandboxFault(route: "om.create_capture", kind: .rateLimit, resetSeconds: 600, count: 1))
            _ = try await h.store.requestCapture(orderID: orderID, amount: nil, at: h.clock.now)
            _ = try await h.reconciler.process(.order(orderID), hinted: true)
            let capture = try #require(try await h.order(of: created).activeIntent)
            #expect(try await h.store.intent(capture)?.state == .intended, "the capture waits for Klarna's reset")

            _ = try await h.askRefund(orderID, 1_000, reference: "after-capture")
            let step = try await h.reconciler.process(.order(orderID), hinted: true)
            let next = try #require(step.next?.due)
            #expect(next > h.clock.now, "the refund does not bring the key back at once while the capture waits")
            #expect(h.sandbox.requests(route: "om.create_refund").isEmpty)
            // (Stepped by hand: the harness's run takes the store's due times, where the refund is due now.)
            h.clock.advance(by: .seconds(601))
            let captured = try await h.reconciler.process(.order(orderID))
            #expect(h.effects(.captured, order: orderID).map(\.amount) == [6_000])
            #expect(captured.next?.due == h.clock.now, "the order ended, and its refund is due")
            _ = try await h.reconciler.process(.order(orderID))
            #expect(h.effects(.refunded, order: orderID).map(\.amount) == [1_000])
            #expect(try await h.refundOutcomes(orderID).map(\.kind) == [.refunded])
        }
    }

    @Test("A refund the daemon made is matched by the payout's RETURN line by its id: no drift, no finding", arguments: StoreKind.allCases)
    func matchedInPayout(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let orderID = try await h.paidOrders([20_000])[0]
            _ = try await h.askRefund(orderID, 5_000, reference: "rma-9")
            try await h.run()
            let refundID = try #require(h.effects(.refunded, order: orderID).first?.refundId)
            _ = try h.sandbox.settle()
            let sync = try await h.settlementService().sync()
            #expect(sync.reconciled == 1 && sync.findingOutcomes == 0 && sync.drift == 0)
            #expect(try await h.settlementOutcomes().isEmpty)
            let lines = try await h.store.settlementLines(orderIDs: [orderID])
            #expect(lines.contains { $0.line.refundID == refundID && $0.source == .daemon }, "\(lines.map(\.note))")
        }
    }
}

extension EngineHarness {
    /// A payment of `amount` placed and captured in full; its order id.
    func capturedOrder(_ amount: Int) async throws -> String {
        let created = try await track(SessionSpec(orderAmount: amount, schedule: RefundTests.completesSoon))
        try await run()
        let order = try await order(of: created)
        #expect(order.outcome == .captured)
        return order.orderID
    }

    /// A refund asked for as the command line asks for it.
    func askRefund(_ orderID: String, _ amount: Int, reference: String) async throws -> IngestResult {
        let ask = RefundAsk(orderID: orderID, amount: amount, reference: reference, description: "returned")
        return try await store.ingest(
            IngestRecord(
                dedupeKey: nil, kind: "refund_request", source: "test", summary: "refund",
                action: .refund(ask, key: IdempotencyKey.make(.refund, ask.keyTarget)),
                callerWakes: false), at: clock.now)
    }

    func refundOutcomes(_ orderID: String) async throws -> [Outcome] {
        try await store.timeline(for: orderID).outcomes.map(\.outcome).filter { $0.kind == .refunded || $0.kind == .refundFailed }
    }
}
