import Foundation
import Testing
import TestSupport
@testable import ReconcilerCore

@Suite("Order state machine")
struct OrderMachineTests {
    let deadlines = Deadlines(
        authorizationWarnBefore: .seconds(3 * 86_400), autoExtendAuthorization: false, pendingFraudInterval: .seconds(900),
        orderRecheckInterval: .seconds(6 * 3_600))

    func order(_ policy: CapturePolicy, placedBy: PlaceOrderMode = PlaceOrderMode.none) -> TrackedOrder {
        Fixtures.order("o-1", session: "hpp-1", kp: "kp-1", reference: "ref", policy: policy, placedBy: placedBy)
    }

    func read(
        _ status: String = "AUTHORIZED", fraud: String = "ACCEPTED", captured: Int = 0, remaining: Int? = nil, expiresIn days: Double = 28
    ) -> OrderObservation {
        OrderObservation(
            status: OrderStatus(rawValue: status), fraudStatus: FraudStatus(rawValue: fraud), orderAmount: 10_000, capturedAmount: captured,
            remainingAuthorizedAmount: remaining ?? (10_000 - captured), currency: "EUR",
            expiresAt: Fixtures.t0.addingTimeInterval(days * 86_400), klarnaReference: "KREF")
    }

    @Test("The first read records order_placed once, with the fraud status")
    func placedOnce() {
        let first = order(.never).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(first.outcomes.map(\.kind) == [.orderPlaced])
        #expect(first.outcomes.first?.fraudStatus == "ACCEPTED")
        #expect(first.outcomes.first?.amount == 10_000)
        var open = order(.onRequest)
        open = open.applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let second = open.applying(read(), request: nil, now: Fixtures.t0.addingTimeInterval(60), deadlines: deadlines)
        #expect(second.outcomes.isEmpty)
    }

    @Test("An order Klarna accepted when the daemon placed it: captured at once or done, without counting a read")
    func placedAndAccepted() {
        let immediate = order(.immediate).placedAndAccepted(amount: 10_000, currency: "EUR", now: Fixtures.t0, deadlines: deadlines)
        #expect(immediate.action == .capture(amount: 10_000, requestID: nil))
        #expect(immediate.order.phase == .capturing)
        #expect(immediate.order.reads == 0)
        #expect(immediate.outcomes.map(\.kind) == [.orderPlaced])
        #expect(immediate.outcomes.first?.fraudStatus == "ACCEPTED")
        let never = order(.never).placedAndAccepted(amount: 10_000, currency: "EUR", now: Fixtures.t0, deadlines: deadlines)
        #expect(never.order.phase == .closed && never.action == nil)
    }

    @Test("PENDING is never captured, whatever the policy", arguments: CapturePolicy.allCases)
    func pendingNeverCaptured(policy: CapturePolicy) {
        let step = order(policy).applying(
            read(fraud: "PENDING"), request: CaptureRequestItem(id: 1, orderID: "o-1", amount: nil, requestedAt: Fixtures.t0), now: Fixtures.t0,
            deadlines: deadlines)
        #expect(step.action == nil)
        #expect(step.order.phase == .pendingFraud)
        #expect(step.order.nextDueAt == Fixtures.t0.addingTimeInterval(900))
    }

    @Test("An unknown fraud status is treated like PENDING")
    func unknownFraud() {
        let step = order(.immediate).applying(read(fraud: "UNDER_REVIEW"), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(step.action == nil)
        #expect(step.order.phase == .pendingFraud)
    }

    @Test("PENDING then ACCEPTED captures under immediate")
    func pendingThenAccepted() {
        let pending = order(.immediate).applying(read(fraud: "PENDING"), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let accepted = pending.applying(read(), request: nil, now: Fixtures.t0.addingTimeInterval(900), deadlines: deadlines)
        #expect(accepted.action == .capture(amount: 10_000, requestID: nil))
        #expect(accepted.order.phase == .capturing)
        #expect(accepted.events.contains { $0.kind == .orderStatus })
    }

    @Test("REJECTED fraud closes as rejected")
    func rejected() {
        let step = order(.immediate).applying(read("CANCELLED", fraud: "REJECTED"), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(step.order.phase == .closed)
        #expect(step.outcomes.map(\.kind) == [.orderPlaced, .rejected])
    }

    @Test(
        "Klarna-side end states close the order",
        arguments: [
            ("CANCELLED", 0, OutcomeKind.cancelled), ("EXPIRED", 0, .expired), ("CAPTURED", 10_000, .captured),
            ("CLOSED", 10_000, .captured), ("CLOSED", 0, .cancelled),
        ])
    func endStates(status: String, captured: Int, kind: OutcomeKind) {
        let step = order(.onRequest).applying(read(status, captured: captured, remaining: 0), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(step.order.phase == .closed)
        #expect(step.order.outcome == kind)
        #expect(step.outcomes.last?.kind == kind)
        #expect(step.action == nil)
    }

    @Test("CAPTURE_ORDER: HPP captured it; the first read says so, and HPP's capture enters the ledger as the shop's own")
    func captureOrderMode() {
        var observed = read("CAPTURED", captured: 10_000)
        observed.captures = [OrderMovements.Movement(id: "cap-hpp", amount: 10_000, at: Fixtures.t0.addingTimeInterval(-5))]
        let step = order(.immediate, placedBy: .captureOrder).applying(observed, request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(step.outcomes.map(\.kind) == [.orderPlaced, .captured])
        #expect(step.outcomes.last?.reason.contains("CAPTURE_ORDER") == true)
        #expect(step.action == nil)
        #expect(
            step.ledgerCaptures == [
                LedgerCapture(
                    orderID: step.order.orderID, captureID: "cap-hpp", amount: 10_000, currency: "EUR",
                    capturedAt: Fixtures.t0.addingTimeInterval(-5), source: .daemon)
            ])
        // An order the daemon did not ask HPP to capture: a capture it did not make is left for the settlement sync.
        #expect(order(.immediate).applying(observed, request: nil, now: Fixtures.t0, deadlines: deadlines).ledgerCaptures.isEmpty)
    }

    @Test("immediate captures the remaining amount (after a partial capture elsewhere too)")
    func immediate() {
        #expect(
            order(.immediate).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).action
                == .capture(amount: 10_000, requestID: nil))
        #expect(
            order(.immediate).applying(read("PART_CAPTURED", captured: 4_000), request: nil, now: Fixtures.t0, deadlines: deadlines).action
                == .capture(amount: 6_000, requestID: nil))
    }

    @Test("never: closes after order_placed without capturing")
    func never() {
        let step = order(.never).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(step.action == nil)
        #expect(step.order.phase == .closed)
        #expect(step.order.outcome == .orderPlaced)
    }

    @Test("on_request waits, then captures the requested or the remaining amount")
    func onRequest() {
        let waiting = order(.onRequest).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines)
        #expect(waiting.action == nil)
        #expect(waiting.order.phase == .awaitingCapture)
        #expect(waiting.order.nextDueAt == Fixtures.t0.addingTimeInterval(6 * 3_600))
        let partial = waiting.order.applying(
            read(), request: CaptureRequestItem(id: 7, orderID: "o-1", amount: 2_500, requestedAt: Fixtures.t0), now: Fixtures.t0,
            deadlines: deadlines)
        #expect(partial.action == .capture(amount: 2_500, requestID: 7))
        #expect(partial.order.phase == .capturing)
        let rest = waiting.order.applying(
            read(), request: CaptureRequestItem(id: 8, orderID: "o-1", amount: nil, requestedAt: Fixtures.t0), now: Fixtures.t0, deadlines: deadlines)
        #expect(rest.action == .capture(amount: 10_000, requestID: 8))
    }

    @Test("A request above what remains is refused with the reason, and the next request is looked at at once")
    func overCapture() {
        let step = order(.onRequest).applying(
            read("PART_CAPTURED", captured: 9_000), request: CaptureRequestItem(id: 3, orderID: "o-1", amount: 5_000, requestedAt: Fixtures.t0),
            now: Fixtures.t0, deadlines: deadlines)
        guard case .refuseRequest(let id, let reason) = step.action else { Issue.record("expected a refusal"); return }
        #expect(id == 3)
        #expect(reason.contains("1000 remains"))
        #expect(step.order.phase == .awaitingCapture)
        #expect(step.order.nextDueAt == Fixtures.t0)
    }

    @Test("Authorization expiry: next look at the warning time, warn once, then expire")
    func authorizationExpiry() {
        let waiting = order(.onRequest).applying(read(expiresIn: 10), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        // Recheck every 6 h is sooner than the warning 7 days away.
        #expect(waiting.nextDueAt == Fixtures.t0.addingTimeInterval(6 * 3_600))
        let close = order(.onRequest).applying(read(expiresIn: 3.1), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        #expect(close.nextDueAt == Fixtures.t0.addingTimeInterval(0.1 * 86_400))

        let warnTime = Fixtures.t0.addingTimeInterval(7 * 86_400)
        let warned = waiting.applying(read(expiresIn: 10), request: nil, now: warnTime, deadlines: deadlines)
        #expect(warned.events.map(\.kind) == [.authorizationExpiring])
        #expect(warned.order.warnedForExpiry == Fixtures.t0.addingTimeInterval(10 * 86_400))
        #expect(warned.action == nil)
        let again = warned.order.applying(read(expiresIn: 10), request: nil, now: warnTime.addingTimeInterval(3_600), deadlines: deadlines)
        #expect(again.events.isEmpty)
        // The next look is no later than the expiry itself.
        #expect(again.order.nextDueAt! <= Fixtures.t0.addingTimeInterval(10 * 86_400))

        let expired = again.order.applying(read(expiresIn: 10), request: nil, now: Fixtures.t0.addingTimeInterval(10 * 86_400), deadlines: deadlines)
        #expect(expired.order.phase == .closed)
        #expect(expired.outcomes.map(\.kind) == [.expired])
    }

    @Test("auto_extend asks for an extension once per expiry date; a new date warns again")
    func autoExtend() {
        var deadlines = self.deadlines
        deadlines.autoExtendAuthorization = true
        let near = Fixtures.t0.addingTimeInterval(8 * 86_400)
        let waiting = order(.onRequest).applying(read(expiresIn: 10), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let first = waiting.applying(read(expiresIn: 10), request: nil, now: near, deadlines: deadlines)
        #expect(first.action == .extendAuthorization)
        let second = first.order.applying(read(expiresIn: 10), request: nil, now: near.addingTimeInterval(60), deadlines: deadlines)
        #expect(second.action == nil)
        let extended = second.order.applying(read(expiresIn: 38), request: nil, now: near.addingTimeInterval(120), deadlines: deadlines)
        #expect(extended.action == nil)
        #expect(extended.events.isEmpty)
        let later = extended.order.applying(read(expiresIn: 38), request: nil, now: Fixtures.t0.addingTimeInterval(36 * 86_400), deadlines: deadlines)
        #expect(later.events.map(\.kind) == [.authorizationExpiring])
        #expect(later.action == .extendAuthorization)
    }

    @Test("A confirmed capture closes the order when nothing remains, else reads again")
    func captureConfirmed() {
        let capturing = order(.onRequest).applying(
            read(), request: CaptureRequestItem(id: 1, orderID: "o-1", amount: 4_000, requestedAt: Fixtures.t0), now: Fixtures.t0,
            deadlines: deadlines
        ).order
        let partial = capturing.captureConfirmed(amount: 4_000, captureID: "cap-1", now: Fixtures.t0)
        #expect(partial.order.phase == .checking)
        #expect(partial.order.capturedAmount == 4_000)
        #expect(partial.order.remainingAuthorizedAmount == 6_000)
        #expect(partial.outcomes.first?.kind == .captured)
        #expect(partial.outcomes.first?.amount == 4_000)
        #expect(partial.outcomes.first?.captureID == "cap-1")
        let full = partial.order.captureConfirmed(amount: 6_000, captureID: "cap-2", now: Fixtures.t0)
        #expect(full.order.phase == .closed)
        #expect(full.order.status == .captured)
        #expect(full.order.outcome == .captured)
    }

    @Test("A confirmed capture ends the intent under way")
    func captureConfirmedEndsIntent() {
        let capturing = order(.immediate).intentStarted(key: "cap-key", now: Fixtures.t0)
        #expect(capturing.captureConfirmed(amount: 4_000, captureID: nil, now: Fixtures.t0).order.activeIntent == nil)
    }

    @Test("Starting an intent records its key and makes the order due now")
    func intentStarted() {
        let waiting = order(.onRequest).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let started = waiting.intentStarted(key: "ext-key", now: Fixtures.t0.addingTimeInterval(10))
        #expect(started.activeIntent == "ext-key")
        #expect(started.nextDueAt == Fixtures.t0.addingTimeInterval(10))
        #expect(started.phase == waiting.phase)
    }

    @Test("Waiting for an intent moves the next look and keeps the intent")
    func waitingForIntent() {
        let started = order(.immediate).intentStarted(key: "cap-key", now: Fixtures.t0)
        let waiting = started.waitingForIntent(until: Fixtures.t0.addingTimeInterval(45))
        #expect(waiting.nextDueAt == Fixtures.t0.addingTimeInterval(45))
        #expect(waiting.activeIntent == "cap-key")
        #expect(waiting.phase == started.phase)
    }

    @Test("An extended authorization ends the intent and reads the order again now")
    func authorizationExtended() {
        let waiting = order(.onRequest).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let step = waiting.intentStarted(key: "ext-key", now: Fixtures.t0).authorizationExtended(now: Fixtures.t0.addingTimeInterval(3))
        #expect(step.order.activeIntent == nil)
        #expect(step.order.phase == .checking)
        #expect(step.order.nextDueAt == Fixtures.t0.addingTimeInterval(3))
        #expect(step.events == [DomainEvent(.authorizationExtended, "Klarna extended the authorization")])
        #expect(step.outcomes.isEmpty)
    }

    @Test("A refused intent is dropped and the order is read now, with Klarna's answer in the event")
    func intentRefused() {
        let capturing = order(.immediate).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order.intentStarted(
            key: "cap-key", now: Fixtures.t0)
        let step = capturing.intentRefused(.capture, error: "HTTP 403 NOT_ALLOWED", now: Fixtures.t0.addingTimeInterval(2))
        #expect(step.order.activeIntent == nil)
        #expect(step.order.phase == .checking)
        #expect(step.order.nextDueAt == Fixtures.t0.addingTimeInterval(2))
        #expect(step.events.map(\.kind) == [.refused])
        #expect(step.events.first?.message.contains("capture (HTTP 403 NOT_ALLOWED)") == true)
        #expect(step.outcomes.isEmpty)
    }

    @Test("A failed intent is dropped and the order closes for an operator")
    func intentFailed() {
        let capturing = order(.immediate).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order.intentStarted(
            key: "cap-key", now: Fixtures.t0)
        let step = capturing.intentFailed("capture failed: HTTP 400; the failure is not retryable")
        #expect(step.order.activeIntent == nil)
        #expect(step.order.phase == .closed)
        #expect(step.order.outcome == .needsAttention)
        #expect(step.order.nextDueAt == nil)
        #expect(step.outcomes.map(\.kind) == [.needsAttention])
        #expect(step.outcomes.first?.reason == "capture failed: HTTP 400; the failure is not retryable")
    }

    @Test("Read failures back off and keep the order open; hints make it due now")
    func failuresAndHints() {
        let waiting = order(.onRequest).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        let failed = waiting.readFailed("timeout", now: Fixtures.t0, retryAfter: .seconds(30))
        #expect(failed.order.nextDueAt == Fixtures.t0.addingTimeInterval(30))
        #expect(failed.order.consecutiveFailures == 1)
        #expect(failed.order.isOpen)
        let hinted = failed.order.hinted(now: Fixtures.t0.addingTimeInterval(5))
        #expect(hinted.nextDueAt == Fixtures.t0.addingTimeInterval(5))
        #expect(hinted.phase == .checking)
    }
}

@Suite("Intents")
struct IntentTests {
    @Test("intended → sent → confirmed, counting attempts")
    func happyPath() {
        let intent = Intent(key: "k", kind: .capture, subject: "o", amount: 100, now: Fixtures.t0)
        #expect(intent.state == .intended)
        let sent = intent.sending(now: Fixtures.t0)
        #expect(sent.state == .sent && sent.attempts == 1 && sent.needsResolution)
        let done = sent.confirmed(result: "cap", now: Fixtures.t0)
        #expect(done.state == .confirmed && done.isFinished && done.result == "cap" && done.lastError == nil)
    }

    @Test("Ambiguous needs a read; a retry goes back to intended with the same key")
    func ambiguousThenRetry() {
        let sent = Intent(key: "k", kind: .placeOrder, subject: "s", now: Fixtures.t0).sending(now: Fixtures.t0)
        let unclear = sent.ambiguous("timeout", now: Fixtures.t0)
        #expect(unclear.needsResolution && !unclear.isFinished)
        let again = unclear.retrying(nil, at: Fixtures.t0.addingTimeInterval(5), now: Fixtures.t0)
        #expect(
            again.state == .intended && again.key == "k" && again.lastError == "timeout" && again.nextAttemptAt == Fixtures.t0.addingTimeInterval(5))
        #expect(again.sending(now: Fixtures.t0).attempts == 2)
        #expect(unclear.failed("refused", now: Fixtures.t0).isFinished)
    }

    @Test("Only OM writes are deduplicated by Klarna")
    func dedup() {
        #expect(Intent.Kind.capture.klarnaDeduplicates)
        #expect(Intent.Kind.extendAuthorization.klarnaDeduplicates)
        #expect(!Intent.Kind.placeOrder.klarnaDeduplicates)
        #expect(!Intent.Kind.customerToken.klarnaDeduplicates)
    }
}

extension OrderMachineTests {
    @Test("Capture requests are taken only by an open on_request order; an open order runs against its authorization's expiry")
    func captureRequestsAndDeadline() {
        var waiting = order(.onRequest).applying(read(), request: nil, now: Fixtures.t0, deadlines: deadlines).order
        #expect(waiting.captureRequestRefusal == nil)
        #expect(waiting.deadline == Fixtures.t0.addingTimeInterval(28 * 86_400))
        #expect(order(.immediate).captureRequestRefusal?.contains("capture policy immediate") == true)
        waiting.phase = .closed
        waiting.outcome = .cancelled
        #expect(waiting.captureRequestRefusal?.contains("is cancelled: nothing to capture") == true)
        #expect(waiting.deadline == nil)
    }
}
