import Foundation
import KlarnaAPI
import KlarnaSandbox
import Testing
import TestSupport
@testable import Engine
@testable import ReconcilerCore
@testable import ReconcilerStore

/// Charges of customer tokens (renewals) as intents, against the sandbox over real sockets with a real store (each
/// test on SQLite and on PostgreSQL): each charge places one order at Klarna or none, whatever fails, with one
/// idempotency key and one body; the order is then captured once.
@Suite("Charges", .serialized)
struct ChargeTests {
    @Test(
        "A charge places one order under 5xx, a reset or a timeout, before or after Klarna acts, and a 429: one order, one key, the same body on every attempt, charge_placed then captured once",
        arguments: StoreKind.allCases,
        [
            ("503 before", SandboxFault.Kind.status, Int?(503), false), ("500 after", .status, 500, true), ("reset after", .reset, nil, true),
            ("timeout after", .delay, nil, true), ("429", .rateLimit, nil, false),
        ])
    func chargeOnceUnderFaults(store: StoreKind, fault: (name: String, kind: SandboxFault.Kind, status: Int?, afterEffect: Bool)) async throws {
        let (name, kind, status, afterEffect) = fault
        try await EngineHarness.with(store: store, requestTimeout: kind == .delay ? .seconds(2) : .seconds(10)) { h in
            let token = try h.sandbox.createCustomerToken(currency: "EUR")
            h.sandbox.addFault(
                SandboxFault(
                    route: "ct.create_order", kind: kind, status: status, delayMs: 2_500, resetSeconds: 5, afterEffect: afterEffect, count: 1))
            let key = IdempotencyKey.make(.charge, ChargeAsk(token: token, reference: "2026-12", amount: 0, currency: "EUR").keyTarget)
            #expect(try await h.askCharge(token, 1_990, reference: "2026-12") == .accepted(wake: [.customerToken(key)]))
            try await h.run()
            let charged = h.sandbox.effects(kind: .tokenCharged)
            #expect(charged.count == 1, "\(name): \(charged.count) orders placed")
            let orderID = try #require(charged.first?.orderId)
            let requests = h.sandbox.requests(route: "ct.create_order")
            #expect(requests.count == 2, "\(name): the failed attempt and the one that got the answer")
            // After Klarna acted, the second attempt gets Klarna's answer to the first; before, it is the first to act.
            #expect(requests.last?.replayed == afterEffect, "\(name)")
            #expect(Set(requests.map(\.idempotencyKey)) == [key])
            #expect(h.sandbox.requests(route: "ct.read_token").count == 1, "the token is read before the first attempt only")
            let outcomes = try await h.chargeOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.chargePlaced, .captured], "\(name)")
            #expect(outcomes.first?.chargeReference == "2026-12" && outcomes.first?.merchantReference == "2026-12")
            #expect(outcomes.first?.customerTokenID == token)
            #expect(h.effects(.captured, order: orderID).map(\.amount) == [1_990])
            let intent = try #require(try await h.store.intent(key))
            #expect(intent.state == .confirmed && intent.result == orderID)
            let order = try #require(try await h.store.order(orderID))
            #expect(order.outcome == .captured && order.currency == "EUR" && order.hppSessionID == nil)
            #expect(try await h.store.openWork().isEmpty)
        }
    }

    @Test(
        "Every attempt sends the body built when the charge was recorded, byte for byte, with the same key after a restart",
        arguments: StoreKind.allCases)
    func sameBytesEveryAttempt(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken(currency: "SEK")
            h.sandbox.addFault(SandboxFault(route: "ct.create_order", kind: .status, status: 502, count: 2))
            _ = try await h.askCharge(token, 5_000, currency: "SEK", reference: "bytes")
            try await h.run()
            let key = IdempotencyKey.make(.charge, "\(token.utf8.count):\(token):bytes")
            let intent = try #require(try await h.store.intent(key))
            let stored = try #require(intent.charge?.body)
            let body = try JSONSerialization.jsonObject(with: Data(stored.utf8)) as? [String: Any]
            #expect(body?["merchant_reference1"] as? String == "bytes" && body?["order_amount"] as? Int == 5_000)
            #expect(body?["purchase_currency"] as? String == "SEK")
            let bodies = h.sandbox.requests(route: "ct.create_order").map(\.body)
            #expect(bodies.count == 3 && Set(bodies).count == 1 && bodies.first == stored)
        }
    }

    @Test(
        "The token is read before the first attempt: cancelled (in any case) or unknown ends the charge as charge_failed with nothing sent; active in lower case is charged",
        arguments: StoreKind.allCases)
    func tokenReadFirst(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let cancelled = try h.sandbox.createCustomerToken()
            let lower = try h.sandbox.createCustomerToken()
            _ = try await h.askCharge(cancelled, 1_000, currency: "SEK", reference: "c-1")
            _ = try await h.askCharge(lower, 1_000, currency: "SEK", reference: "l-1")
            _ = try await h.askCharge("no-such-token", 1_000, currency: "SEK", reference: "u-1")
            // Cancelled between the request and the send; Klarna spells statuses as it likes.
            try h.sandbox.setCustomerTokenStatus(cancelled, "cancelled")
            try h.sandbox.setCustomerTokenStatus(lower, "active")
            try await h.run()
            let sent = h.sandbox.requests(route: "ct.create_order")
            #expect(sent.count == 1 && sent.first?.path.contains(lower) == true)
            let all = try await h.allOutcomes()
            let failed = all.filter { $0.kind == .chargeFailed }
            #expect(Set(failed.map(\.chargeReference)) == ["c-1", "u-1"])
            #expect(failed.first { $0.chargeReference == "c-1" }?.reason.contains("cancelled, not ACTIVE") == true)
            #expect(failed.first { $0.chargeReference == "u-1" }?.reason.contains("Klarna does not know customer token") == true)
            #expect(all.filter { $0.kind == .chargePlaced }.map(\.chargeReference) == ["l-1"])
        }
    }

    @Test("The read of the token fails (503): it is tried again with a growing wait, then the charge is made once", arguments: StoreKind.allCases)
    func tokenReadFails(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken()
            h.sandbox.addFault(SandboxFault(route: "ct.read_token", kind: .status, status: 503, count: 2))
            _ = try await h.askCharge(token, 1_000, currency: "SEK", reference: "slow")
            let key = IdempotencyKey.make(.charge, "\(token.utf8.count):\(token):slow")
            _ = try await h.reconciler.process(.customerToken(key))
            let first = try #require(try await h.store.intent(key))
            #expect(first.readFailures == 1 && first.state == .intended && first.attempts == 0)
            #expect(first.nextAttemptAt.map { $0 > h.clock.now } == true, "it waits before reading again")
            #expect(h.sandbox.requests(route: "ct.create_order").isEmpty)
            try await h.run()
            #expect(h.sandbox.requests(route: "ct.read_token").count == 3)
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1)
            #expect(try await h.store.intent(key)?.state == .confirmed)
        }
    }

    @Test(
        "A decline (403, or a 400 naming a fraud status) ends the charge as charge_declined with Klarna's code and correlation id, final for its reference; a new reference is charged",
        arguments: StoreKind.allCases)
    func declines(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken()
            try h.sandbox.declineCharges(of: token, [.forbidden, .rejected])
            _ = try await h.askCharge(token, 2_000, currency: "SEK", reference: "d-1")
            try await h.run()
            _ = try await h.askCharge(token, 2_000, currency: "SEK", reference: "d-2")
            try await h.run()
            _ = try await h.askCharge(token, 2_000, currency: "SEK", reference: "d-3")
            try await h.run()
            #expect(h.sandbox.requests(route: "ct.create_order").count == 3, "one attempt each: a decline is not retried")
            let all = try await h.allOutcomes()
            let declined = all.filter { $0.kind == .chargeDeclined }
            #expect(declined.map(\.chargeReference) == ["d-1", "d-2"])
            #expect(declined.last?.klarnaErrorCode == "PURCHASE_DECLINED" && declined.last?.klarnaCorrelationID != nil)
            #expect(declined.last?.reason.contains("fraud_status REJECTED") == true, "\(declined.last?.reason ?? "")")
            #expect(all.filter { $0.kind == .chargePlaced }.map(\.chargeReference) == ["d-3"])
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1)
        }
    }

    @Test(
        "The same reference twice is one charge; with another amount or currency it is refused (409) and nothing is recorded; a charge in another currency than the token's is charge_failed (Klarna's 409)",
        arguments: StoreKind.allCases)
    func sameReferenceTwice(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken(currency: "SEK")
            _ = try await h.askCharge(token, 1_000, currency: "SEK", reference: "same")
            guard case .repeated = try await h.askCharge(token, 1_000, currency: "SEK", reference: "same") else {
                Issue.record("a repeat is not answered as one")
                return
            }
            guard case .refused(409, "reference_conflict", let detail) = try await h.askCharge(token, 2_000, currency: "SEK", reference: "same")
            else {
                Issue.record("another amount under one reference is not refused")
                return
            }
            #expect(detail.contains("already names a charge of 1000 SEK"), "\(detail)")
            guard case .refused(409, "reference_conflict", _) = try await h.askCharge(token, 1_000, currency: "EUR", reference: "same") else {
                Issue.record("another currency under one reference is not refused")
                return
            }
            _ = try await h.askCharge(token, 1_000, currency: "EUR", reference: "euro")
            try await h.run()
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1)
            let all = try await h.allOutcomes()
            #expect(all.filter { $0.kind == .chargeFailed }.map(\.chargeReference) == ["euro"])
            #expect(h.sandbox.requests(route: "ct.create_order").count == 2, "the euro charge is not retried after Klarna's 409")
        }
    }

    @Test(
        "A charge marked sent whose sender died (before the request left, or after Klarna placed the order) is sent again with the same key: one order",
        arguments: StoreKind.allCases, [false, true])
    func sentMarkThenDeath(store: StoreKind, klarnaActed: Bool) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken()
            _ = try await h.askCharge(token, 3_000, currency: "SEK", reference: "dead")
            let key = IdempotencyKey.make(.charge, "\(token.utf8.count):\(token):dead")
            let recorded = try #require(try await h.store.intent(key))
            // What a daemon killed right after its sent mark leaves: the intent sent, its request perhaps at Klarna.
            var change = Change()
            change.intents = [recorded.sending(now: h.clock.now)]
            try await h.store.commit(change, at: h.clock.now)
            if klarnaActed { _ = try await h.client.chargeCustomerToken(token, body: recorded.charge?.body ?? "", idempotencyKey: key) }
            h.clock.advance(by: .seconds(1))
            try await h.run()
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1)
            #expect(Set(h.sandbox.requests(route: "ct.create_order").map(\.idempotencyKey)) == [key])
            let all = try await h.allOutcomes()
            #expect(all.filter { $0.kind == .chargePlaced }.count == 1 && all.filter { $0.kind == .captured }.count == 1)
        }
    }

    @Test(
        "No clear answer within Klarna's 24 hours: nothing is sent after the window, the charge ends needs_attention, and no order is placed",
        arguments: StoreKind.allCases)
    func unclearAfterWindow(store: StoreKind) async throws {
        // Backoff up to 30 minutes, so that a day of attempts is a few dozen steps.
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxDelay = .seconds(1_800)
        try await EngineHarness.with(store: store, settings: settings) { h in
            let token = try h.sandbox.createCustomerToken()
            h.sandbox.addFault(SandboxFault(route: "ct.create_order", kind: .status, status: 503, count: 100_000))
            _ = try await h.askCharge(token, 3_000, currency: "SEK", reference: "never")
            let started = h.clock.now
            try await h.run(for: .seconds(26 * 3_600))
            let requests = h.sandbox.requests(route: "ct.create_order")
            #expect(requests.count > 20, "sent again and again inside the window: \(requests.count)")
            let window = started.addingTimeInterval(24 * 3_600)
            #expect(requests.allSatisfy { $0.at < window }, "an attempt went out after Klarna's 24 hours")
            #expect(h.sandbox.effects(kind: .tokenCharged).isEmpty)
            let all = try await h.allOutcomes()
            #expect(all.map(\.kind) == [.needsAttention])
            #expect(all.first?.reason.contains("within Klarna's 24 hours") == true, "\(all.first?.reason ?? "")")
            #expect(try await h.store.openWork().isEmpty)
        }
    }

    @Test(
        "Klarna placed the order but no answer came within its 24 hours: an OM notification for an order the daemon does not track names it by the merchant reference, and it is followed, read first, then captured once",
        arguments: StoreKind.allCases)
    func unclearFoundByNotification(store: StoreKind) async throws {
        var settings = EngineHarness.fastSettings
        settings.writeRetry.maxDelay = .seconds(1_800)
        try await EngineHarness.with(store: store, settings: settings) { h in
            let token = try h.sandbox.createCustomerToken()
            // Klarna acts on the first attempt; every answer, the replayed ones too, is lost.
            h.sandbox.addFault(SandboxFault(route: "ct.create_order", kind: .status, status: 503, afterEffect: true, count: 100_000))
            _ = try await h.askCharge(token, 3_000, currency: "SEK", reference: "lost-answer")
            try await h.run(for: .seconds(3_600))
            let orderID = try #require(h.sandbox.effects(kind: .tokenCharged).first?.orderId)
            let notified = IngestRecord(
                dedupeKey: "om-notification:\(orderID):FRAUD_RISK_ACCEPTED", kind: "om_notification", source: "test", summary: "notification",
                action: .hintOrder(orderID: orderID))
            _ = try await h.store.ingest(notified, at: h.clock.now)
            try await h.run(for: .seconds(26 * 3_600))
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1)
            let outcomes = try await h.chargeOutcomes(orderID)
            #expect(outcomes.map(\.kind) == [.chargePlaced, .captured], "\(outcomes.map(\.reason))")
            #expect(outcomes.first?.reason.contains("an OM notification") == true, "\(outcomes.first?.reason ?? "")")
            #expect(h.effects(.captured, order: orderID).map(\.amount) == [3_000])
            #expect(try await h.store.openWork().isEmpty)
        }
    }

    @Test(
        "A charge's order that Klarna leaves PENDING is followed until accepted, then captured once; capture on_request waits for a request",
        arguments: StoreKind.allCases)
    func pendingThenCaptured(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken()
            try h.sandbox.setChargeFraudStatus(of: token, "PENDING")
            _ = try await h.askCharge(token, 4_000, currency: "SEK", reference: "pending")
            try await h.run(for: .seconds(120))
            let orderID = try #require(h.sandbox.effects(kind: .tokenCharged).first?.orderId)
            #expect(try await h.store.order(orderID)?.phase == .pendingFraud)
            try h.sandbox.setFraudStatus(orderID: orderID, "ACCEPTED")
            try await h.run()
            #expect(h.effects(.captured, order: orderID).map(\.amount) == [4_000])

            try h.sandbox.setChargeFraudStatus(of: token, "ACCEPTED")
            _ = try await h.askCharge(token, 500, currency: "SEK", reference: "later", capture: .onRequest)
            try await h.run()
            let second = try #require(h.sandbox.effects(kind: .tokenCharged).last?.orderId)
            #expect(second != orderID)
            #expect(try await h.store.order(second)?.phase == .awaitingCapture)
            #expect(h.effects(.captured, order: second).isEmpty)
        }
    }
}

extension EngineHarness {
    /// A charge asked for as the socket or the command line asks for it.
    func askCharge(
        _ token: String, _ amount: Int, currency: String = "EUR", reference: String, capture: CapturePolicy = .immediate
    ) async throws -> IngestResult {
        let ask = ChargeAsk(token: token, reference: reference, amount: amount, currency: currency)
        return try await store.ingest(
            IngestRecord(
                dedupeKey: nil, kind: "charge_request", source: "test", summary: "charge",
                action: .charge(ask, key: IdempotencyKey.make(.charge, ask.keyTarget), capture: capture), callerWakes: false), at: clock.now)
    }

    /// The outcomes of `orderID` (a charge's `charge_placed` is filed under its order).
    func chargeOutcomes(_ orderID: String) async throws -> [Outcome] {
        try await store.timeline(for: orderID).outcomes.map(\.outcome)
    }

    /// Every outcome recorded, oldest first.
    func allOutcomes() async throws -> [Outcome] {
        try await store.undeliveredOutcomes(now: clock.now.addingTimeInterval(365 * 86_400), limit: 1_000).map(\.outcome)
    }
}

/// Customer tokens as operators see them, and their cancellation: an intent sent once, against the sandbox over real
/// sockets with a real store (each test on SQLite and on PostgreSQL).
@Suite("Customer tokens", .serialized)
struct CustomerTokenTests {
    @Test(
        "A token's cancellation is sent until Klarna answers (a 503 first), once: customer_token_cancelled; asked again it is the same; a charge recorded before and not yet sent then reads the token and is not made",
        arguments: StoreKind.allCases)
    func cancel(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let token = try h.sandbox.createCustomerToken()
            _ = try await h.askCharge(token, 1_000, currency: "SEK", reference: "placed")
            try await h.run()
            _ = try await h.askCharge(token, 1_000, currency: "SEK", reference: "after-cancel")
            h.sandbox.addFault(SandboxFault(route: "ct.update_status", kind: .status, status: 503, count: 1))
            let desk = TokenDesk(store: h.store, accounts: h.reconciler.accounts)
            guard case .recorded(let recorded) = try await desk.cancel(token, account: .default, by: "test", wait: .zero) else {
                Issue.record("the cancellation is not recorded")
                return
            }
            #expect(recorded.kind == .cancelToken && recorded.subject == Redact.tail(token), "shown by its tail")
            guard case .repeated = try await desk.cancel(token, account: .default, by: "test", wait: .zero) else {
                Issue.record("a second ask is not the same cancellation")
                return
            }
            // The cancellation first (its 503, then Klarna's answer), then the charge that was waiting: it reads the
            // token, cancelled, and sends nothing.
            let cancelKey = IdempotencyKey.make(.cancelToken, token)
            _ = try await h.reconciler.process(.customerToken(cancelKey))
            let waiting = try #require(try await h.store.intent(cancelKey))
            #expect(waiting.state == .ambiguous && waiting.attempts == 1)
            let retryAt = try #require(waiting.nextAttemptAt)
            h.clock.advance(by: Duration(timeInterval: max(0, retryAt.timeIntervalSince(h.clock.now))))
            _ = try await h.reconciler.process(.customerToken(cancelKey))
            #expect(try await h.store.intent(cancelKey)?.state == .confirmed)
            try await h.run()
            #expect(h.sandbox.effects(kind: .customerTokenCancelled).count == 1)
            #expect(h.sandbox.requests(route: "ct.update_status").count == 2, "the 503, then the cancellation")
            #expect(h.sandbox.effects(kind: .tokenCharged).count == 1, "only the charge made before the cancellation")
            let all = try await h.allOutcomes()
            #expect(all.filter { $0.kind == .customerTokenCancelled }.map(\.customerTokenID) == [token])
            #expect(all.filter { $0.kind == .chargeFailed }.map(\.chargeReference) == ["after-cancel"])

            let view = try #require(try await desk.token(token))
            #expect(view.token == Redact.tail(token) && view.status == "CANCELLED" && view.statusNote == nil)
            #expect(view.charges.map(\.reference) == ["placed", "after-cancel"] && view.charges.map(\.state) == [.confirmed, .failed])
            #expect(view.cancellation?.state == .confirmed)
            let listed = try await desk.tokens(limit: 10)
            #expect(listed.map(\.token) == [Redact.tail(token)] && listed.first?.charges.count == 2)
            #expect(try await TokenDesk(store: h.store).token(token)?.statusNote == "not read: the daemon is not running")
            #expect(try await desk.token("never-seen-token") == nil)
        }
    }

    @Test(
        "A token the daemon created at a tokenize checkout is listed with its session and account; cancelling a token Klarna does not know ends needs_attention",
        arguments: StoreKind.allCases)
    func createdAndUnknown(store: StoreKind) async throws {
        try await EngineHarness.with(store: store) { h in
            let created = try await h.track(
                SessionSpec(orderAmount: 5_000, schedule: [ScheduleStep(afterSeconds: 2, status: "COMPLETED")]), purpose: .buyAndTokenize)
            try await h.run()
            let token = try #require(try await h.session(created).customerTokenID)
            let desk = TokenDesk(store: h.store, accounts: h.reconciler.accounts)
            let view = try #require(try await desk.token(token))
            #expect(view.createdBy == created.hppSessionId && view.status == "ACTIVE" && view.charges.isEmpty)

            _ = try await desk.cancel("unknown-token-1", account: .default, by: "test", wait: .zero)
            try await h.run()
            let outcome = try #require(try await h.allOutcomes().last)
            #expect(outcome.kind == .needsAttention && outcome.reason.contains("was not cancelled"), "\(outcome.reason)")
            #expect(h.sandbox.requests(route: "ct.update_status").count == 1, "Klarna's 404 is final")
        }
    }
}
