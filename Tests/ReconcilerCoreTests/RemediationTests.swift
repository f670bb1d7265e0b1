import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

/// Where operator requests apply, why they are refused, and what re-driving a payment changes.
@Suite("Remediation rules")
struct RemediationTests {
    func session(
        _ phase: TrackedSession.Phase = .polling, outcome: OutcomeKind? = nil, token: String? = nil, tokenExpires: TimeInterval = 3_600
    ) -> TrackedSession {
        Fixtures.session(
            "hpp-1", kp: "kp-1", reference: "ref", policy: .immediate, phase: phase, outcome: outcome, token: token,
            tokenExpiresAt: token == nil ? nil : Fixtures.t0.addingTimeInterval(tokenExpires))
    }

    func order(
        _ phase: TrackedOrder.Phase = .awaitingCapture, outcome: OutcomeKind? = nil, captured: Int = 0, remaining: Int = 10_000
    ) -> TrackedOrder {
        Fixtures.order(
            "o-1", session: "hpp-1", kp: "kp-1", reference: "ref", placedBy: PlaceOrderMode.none, phase: phase, outcome: outcome,
            amount: 10_000, captured: captured, remaining: remaining)
    }

    func view(sessions: [TrackedSession] = [], orders: [TrackedOrder] = [], intents: [Intent] = [], held: Set<RemediationTarget> = []) -> PaymentView
    {
        PaymentView(sessions: sessions, orders: orders, intents: intents, held: held)
    }

    func refusal(_ result: Result<[RemediationTarget], RemediationRefusal>) -> RemediationRefusal? {
        if case .failure(let refusal) = result { return refusal }
        return nil
    }

    @Test("Nothing tracked is 404 for every action")
    func unknown() {
        for action in OperatorAction.allCases {
            #expect(refusal(Remediation.targets(action, payment: view(), now: Fixtures.t0))?.status == 404)
        }
    }

    @Test("hold takes the open parts, refuses a finished payment and one held already; release takes only held parts")
    func holdAndRelease() throws {
        let open = view(sessions: [session(.ordered)], orders: [order()])
        #expect(try Remediation.targets(.hold, payment: open, now: Fixtures.t0).get() == [.order("o-1")])
        #expect(
            refusal(
                Remediation.targets(
                    .hold, payment: view(sessions: [session(.ordered)], orders: [order(.closed, outcome: .captured)]), now: Fixtures.t0))?.reason
                .contains("nothing to hold: order o-1 is captured") == true)
        let held = view(sessions: [session(.ordered)], orders: [order()], held: [.order("o-1")])
        #expect(refusal(Remediation.targets(.hold, payment: held, now: Fixtures.t0))?.reason == "already held")
        #expect(try Remediation.targets(.release, payment: held, now: Fixtures.t0).get() == [.order("o-1")])
        #expect(refusal(Remediation.targets(.release, payment: open, now: Fixtures.t0))?.reason == "not held")
    }

    @Test("retry refuses a payment that is fine or held, and takes a needs_attention order before its session")
    func retryTargets() throws {
        let fine = view(sessions: [session(.ordered)], orders: [order(.closed, outcome: .captured)])
        #expect(refusal(Remediation.targets(.retry, payment: fine, now: Fixtures.t0))?.reason == "nothing to retry: order o-1 is captured")
        #expect(
            refusal(Remediation.targets(.retry, payment: view(sessions: [session()]), now: Fixtures.t0))?.reason.contains("nothing to retry") == true)
        let stuck = view(sessions: [session(.ordered)], orders: [order(.closed, outcome: .needsAttention)])
        #expect(try Remediation.targets(.retry, payment: stuck, now: Fixtures.t0).get() == [.order("o-1")])
        let heldStuck = view(sessions: [session(.ordered)], orders: [order(.closed, outcome: .needsAttention)], held: [.order("o-1")])
        #expect(refusal(Remediation.targets(.retry, payment: heldStuck, now: Fixtures.t0))?.reason.contains("held") == true)
        #expect(refusal(Remediation.targets(.retry, payment: stuck, orderID: "o-2", now: Fixtures.t0))?.reason.contains("exists already") == true)
        #expect(refusal(Remediation.targets(.hold, payment: stuck, orderID: "o-2", now: Fixtures.t0))?.status == 400)
    }

    @Test("retry of a session whose token expired is refused: Klarna no longer accepts it")
    func expiredToken() throws {
        let expired = session(.closed, outcome: .expired, token: "tok-123456", tokenExpires: 3_600)
        let answer = Remediation.targets(.retry, payment: view(sessions: [expired]), now: Fixtures.t0.addingTimeInterval(3_601))
        #expect(refusal(answer)?.reason.contains("authorization token expired") == true)
        // Before its expiry the same session may be re-driven.
        #expect(
            try Remediation.targets(.retry, payment: view(sessions: [expired]), now: Fixtures.t0.addingTimeInterval(60)).get() == [.session("hpp-1")])
    }

    @Test("retry of an authorized session goes back to its intent, made unclear so that Klarna is read before any attempt")
    func retryAuthorized() {
        let stuck = session(.closed, outcome: .needsAttention, token: "tok-123456")
        let failed = Intent(key: "k", kind: .placeOrder, subject: "hpp-1", now: Fixtures.t0).sending(now: Fixtures.t0).failed(
            "HTTP 400", now: Fixtures.t0)
        let (step, intent) = stuck.retried(intents: [failed], orderID: nil, by: "uid 0 (root) via the command line", now: Fixtures.t0)
        #expect(step.session.phase == .authorized)
        #expect(step.session.outcome == nil)
        #expect(step.session.nextDueAt == Fixtures.t0)
        #expect(intent?.state == .ambiguous)
        #expect(intent?.needsResolution == true)
        #expect(step.events.first?.message.contains("uid 0 (root)") == true)
    }

    @Test("retry --order-id records the order Klarna placed and hands the session over to it")
    func retryWithOrderID() {
        let stuck = session(.closed, outcome: .needsAttention, token: "tok-123456")
        let unclear = Intent(key: "k", kind: .placeOrder, subject: "hpp-1", now: Fixtures.t0).sending(now: Fixtures.t0).ambiguous(
            "reset", now: Fixtures.t0)
        #expect(stuck.retryRefusal(orderID: "o-9", now: Fixtures.t0) == nil)
        let (step, intent) = stuck.retried(intents: [unclear], orderID: "o-9", by: "someone", now: Fixtures.t0)
        #expect(step.session.phase == .ordered)
        #expect(step.session.orderID == "o-9")
        #expect(step.handOff == OrderHandOff(orderID: "o-9", placedBy: PlaceOrderMode.none))
        #expect(intent?.state == .confirmed && intent?.result == "o-9")
        // A session that never reached create-order has no lost order id.
        #expect(session(.closed, outcome: .needsAttention).retryRefusal(orderID: "o-9", now: Fixtures.t0) != nil)
    }

    @Test("retry of an order whose capture failed takes the capture up again under its own key, after a read")
    func retryOrder() {
        let stuck = order(.closed, outcome: .needsAttention)
        let capture = Intent(key: "cap", kind: .capture, subject: "o-1", amount: 10_000, now: Fixtures.t0).sending(now: Fixtures.t0).failed(
            "HTTP 400", now: Fixtures.t0)
        let (step, intent) = stuck.retried(intents: [capture], by: "someone", now: Fixtures.t0)
        #expect(step.order.phase == .checking && step.order.outcome == nil)
        #expect(step.order.activeIntent == "cap")
        #expect(intent?.key == "cap" && intent?.state == .ambiguous)
    }

    @Test("cancel only without captures; release-remaining only after a partial capture with something left")
    func cancelAndRelease() {
        #expect(order().cancelRefusal == nil)
        #expect(order(.closed, outcome: .orderPlaced).cancelRefusal == nil)
        #expect(order(.closed, outcome: .captured, captured: 10_000, remaining: 0).cancelRefusal?.reason.contains("has captures") == true)
        #expect(order(.closed, outcome: .cancelled).cancelRefusal?.reason.contains("is cancelled") == true)
        var busy = order()
        busy.activeIntent = "cap"
        #expect(busy.cancelRefusal?.reason.contains("under way") == true)
        #expect(order().releaseRemainingRefusal?.reason.contains("no captures") == true)
        #expect(order(.checking, captured: 4_000, remaining: 6_000).releaseRemainingRefusal == nil)
        #expect(order(.closed, outcome: .captured, captured: 10_000, remaining: 0).releaseRemainingRefusal != nil)

        let released = order(.checking, captured: 4_000, remaining: 6_000).remainingReleased()
        #expect(released.order.phase == .closed && released.order.outcome == .captured)
        #expect(released.outcomes.first?.amount == 4_000)
        let cancelled = order().cancelledOnRequest()
        #expect(cancelled.order.outcome == .cancelled && cancelled.outcomes.map(\.kind) == [.cancelled])
        // A closed, uncaptured order (capture policy never) reopens to follow its cancel.
        let reopened = order(.closed, outcome: .orderPlaced).operatorIntent(.cancel, key: "c", by: "someone", now: Fixtures.t0)
        #expect(reopened.order.isOpen && reopened.order.activeIntent == "c")
    }

    @Test("A reference that names several payments is refused: a repair applies to one, named exactly")
    func severalPayments() {
        var other = session(.ordered)
        other.hppSessionID = "hpp-2"
        var second = order(.closed, outcome: .needsAttention)
        second.orderID = "o-2"
        let answer = Remediation.targets(.cancel, payment: view(sessions: [session(.ordered), other], orders: [order(), second]), now: Fixtures.t0)
        #expect(refusal(answer)?.reason.contains("matches 2 payments") == true)
    }

    @Test("An order named with --order-id is checked against the payment's merchant reference on its first read")
    func namedOrderChecked() {
        var named = order()
        named.namedByOperator = true
        #expect(named.namedOrderMismatch(merchantReferenceAtKlarna: "ref") == nil)
        #expect(named.namedOrderMismatch(merchantReferenceAtKlarna: nil) == nil)
        #expect(named.namedOrderMismatch(merchantReferenceAtKlarna: "other")?.contains("not this payment's order") == true)
        #expect(order().namedOrderMismatch(merchantReferenceAtKlarna: "other") == nil, "an order the daemon found is not checked")
    }
}
