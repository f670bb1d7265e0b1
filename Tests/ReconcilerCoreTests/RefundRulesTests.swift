import Foundation
import ReconcilerCore
import Testing
import TestSupport

@Suite("Refund rules: which requests are recorded, what a read allows before each attempt")
struct RefundRulesTests {
    let now = Fixtures.t0
    let ask = RefundAsk(orderID: "o-1", amount: 2_000, reference: "rma-1", description: "returned")

    func order(_ status: OrderStatus? = .captured) -> TrackedOrder {
        var order = TrackedOrder(
            orderID: "o-1", hppSessionID: "h-1", kpSessionID: "kp-1", merchantReference: "shop-1", capturePolicy: .immediate, placedBy: .none,
            createdAt: now)
        order.status = status
        order.currency = "EUR"
        return order
    }

    func intent(attempts: Int = 0, amount: Int = 2_000) -> Intent {
        var intent = Intent(key: "k", kind: .refund, subject: "o-1", amount: amount, now: now)
        intent.reference = "rma-1"
        intent.attempts = attempts
        return intent
    }

    func facts(captured: Int? = 10_000, refunded: Int? = nil, refunds: [RefundFacts.Seen] = [], status: OrderStatus? = .captured) -> RefundFacts {
        RefundFacts(status: status, capturedTotal: captured, refundedTotal: refunded, refunds: refunds, currency: "EUR")
    }

    @Test("A new request is recorded as an intent due now, with its reference and description")
    func recorded() throws {
        guard case .record(let intent) = RefundRules.request(ask, key: "k", order: order(), existing: nil, now: now) else {
            Issue.record("not recorded")
            return
        }
        #expect(intent.kind == .refund && intent.subject == "o-1" && intent.amount == 2_000 && intent.state == .intended)
        #expect(intent.reference == "rma-1" && intent.refundDescription == "returned" && intent.nextAttemptAt == now)
    }

    @Test("The same reference again is the refund asked for; with another amount it is refused 409; an unknown or cancelled order is refused")
    func refusedRequests() {
        let existing = intent()
        #expect(RefundRules.request(ask, key: "k", order: order(), existing: existing, now: now) == .repeated(existing))
        var other = ask
        other.amount = 3_000
        guard
            case .refused(409, "reference_conflict", let reason) = RefundRules.request(other, key: "k", order: order(), existing: existing, now: now)
        else {
            Issue.record("another amount was not refused")
            return
        }
        #expect(reason.contains("already names a refund of 2000"))
        guard case .refused(404, "unknown_order", _) = RefundRules.request(ask, key: "k", order: nil, existing: nil, now: now) else {
            Issue.record("an unknown order was not refused")
            return
        }
        guard case .refused(409, "not_refundable", _) = RefundRules.request(ask, key: "k", order: order(.cancelled), existing: nil, now: now) else {
            Issue.record("a cancelled order was not refused")
            return
        }
    }

    @Test("Sent when captured minus refunded covers it; refused when it does not, when nothing was captured, when cancelled")
    func beforeSending() {
        #expect(RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts()) == .send)
        #expect(RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunded: 8_000)) == .send)
        #expect(
            RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunded: 8_001))
                == .refuse("a refund of 2000 is more than order o-1 has left to refund: captured 10000 minus refunded 8001 is 1999"))
        // Without Klarna's total, the listed refunds count.
        let listed = [RefundFacts.Seen(id: "r-0", amount: 9_000, reference: "other")]
        #expect(RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunds: listed)) != .send)
        #expect(
            RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(captured: 0))
                == .refuse("order o-1 has nothing captured at Klarna: nothing to refund"))
        #expect(RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(captured: nil)) != .send)
        #expect(RefundRules.beforeSending(intent(), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(status: .cancelled)) != .send)
    }

    @Test("A refund with its reference on the order is this intent's after an attempt, and someone else's before one: never sent again either way")
    func referenceOnTheOrder() {
        let seen = [RefundFacts.Seen(id: "r-1", amount: 2_000, reference: "rma-1")]
        #expect(
            RefundRules.beforeSending(
                intent(attempts: 1), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunded: 2_000, refunds: seen))
                == .done(refundID: "r-1"))
        guard
            case .refuse(let reason) = RefundRules.beforeSending(
                intent(attempts: 0), maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunded: 2_000, refunds: seen))
        else {
            Issue.record("a refund made outside the daemon under this reference would be repeated")
            return
        }
        #expect(reason.contains("did not make"))
    }

    @Test("Out of attempts without a clear answer: a read that lists no refund with the reference ends it as not made; one that lists it, as made")
    func outOfAttempts() {
        var unclear = intent(attempts: 5).ambiguous("HTTP 503", now: now)
        #expect(unclear.needsResolution)
        // The last attempt may still be on its way (a crash right after its sent mark): read again once it cannot be.
        #expect(
            RefundRules.beforeSending(unclear, maxAttempts: 5, longestCall: .seconds(60), now: now.addingTimeInterval(59), facts: facts())
                == .readAgain(at: now.addingTimeInterval(60)))
        guard
            case .refuse(let reason) = RefundRules.beforeSending(
                unclear, maxAttempts: 5, longestCall: .seconds(60), now: now.addingTimeInterval(60), facts: facts())
        else {
            Issue.record("sent a sixth time")
            return
        }
        #expect(reason.contains("none of 5 attempts clearly") && reason.contains("lists no refund with reference rma-1: not made"))
        let seen = [RefundFacts.Seen(id: "r-1", amount: 2_000, reference: "rma-1")]
        #expect(
            RefundRules.beforeSending(unclear, maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts(refunded: 2_000, refunds: seen))
                == .done(refundID: "r-1"))
        unclear.attempts = 4
        #expect(
            RefundRules.beforeSending(unclear, maxAttempts: 5, longestCall: .seconds(60), now: now, facts: facts()) == .send,
            "an attempt left: the same key again")
    }

    @Test("The idempotency key's target cannot be spelled by another order and reference; a key met under another order is a conflict")
    func keyTargets() {
        #expect(RefundAsk(orderID: "a:1", amount: 1, reference: "x").keyTarget != RefundAsk(orderID: "a", amount: 1, reference: "1:x").keyTarget)
        var other = intent()
        other.subject = "o-2"
        guard case .refused(409, "reference_conflict", _) = RefundRules.request(ask, key: "k", order: order(), existing: other, now: now) else {
            Issue.record("an intent of another order answered as a repeat")
            return
        }
        #expect(RefundAsk.textProblem("") != nil && RefundAsk.textProblem(String(repeating: "r", count: 256)) != nil)
        #expect(RefundAsk.textProblem("a\u{7}b") != nil && RefundAsk.textProblem("rma 1 – Schuhe") == nil)
    }

    @Test("Refunded: the outcome names the order's payment, the refund and its reference; the ledger holds it as the daemon's")
    func outcomes() {
        let (outcome, ledger) = RefundRules.refunded(intent(attempts: 1), refundID: "r-7", order: order(), currency: "SEK", now: now)
        #expect(outcome.kind == .refunded && outcome.refundID == "r-7" && outcome.refundReference == "rma-1")
        #expect(outcome.orderID == "o-1" && outcome.hppSessionID == "h-1" && outcome.merchantReference == "shop-1" && outcome.amount == 2_000)
        #expect(outcome.currency == "SEK")
        #expect(ledger == LedgerRefund(orderID: "o-1", refundID: "r-7", amount: 2_000, at: now, source: .daemon))
        let failed = RefundRules.failed(intent(), reason: "no", order: nil, currency: nil)
        #expect(failed.kind == .refundFailed && failed.reason == "no" && failed.refundReference == "rma-1" && failed.hppSessionID == nil)
    }
}
