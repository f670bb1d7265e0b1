import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Refunds the shop asked for: intents on their order that run whatever the order's phase (a captured order is
/// closed) and never change the order. Every attempt reads the order first (``RefundRules/beforeSending(_:facts:)``):
/// Klarna's own limits, and after an unclear answer whether the refund was made, found by its reference.
extension Reconciler {
    /// The oldest refund under way on `orderID`, if any.
    func pendingRefund(of orderID: String) async throws -> Intent? {
        try await store.intents(subject: orderID).first { $0.kind == .refund && !$0.isFinished }
    }

    /// One step of `intent`, a refund of `order`; then the order's own plan, or at once when another refund waits.
    func driveRefund(_ order: TrackedOrder, _ intent: Intent) async throws -> StepResult {
        var intent = intent
        var change = Change()
        var now = clock.now
        if let next = intent.nextAttemptAt, !now.hasReached(next) { return Self.refundWaits(until: next, order) }
        let detail = ["intent": intent.key, "reference": intent.reference ?? ""]
        let read: KlarnaAPI.Order
        switch try await klarna(&change, .inMotion, { client in try await client.readOrder(id: order.orderID) }) {
        case .failure(let error) where error.answer.endsWhatWasRead:
            // No order at Klarna, so no refund of it either, whatever an earlier attempt did.
            return try await refundEnded(
                order, intent.failed(Self.short(error), now: now),
                reason: "Klarna does not know order \(order.orderID) (\(Self.short(error))): not refunded",
                currency: nil, change: change, detail: detail.merging(Self.detail(error)) { $1 })
        case .failure(let error):
            let at = try await readBeforeAttemptFailed(
                intent, error, "reading order \(order.orderID) before refunding", owner: (order.hppSessionID, order.orderID), detail: detail,
                change: change)
            return Self.refundWaits(until: at, order)
        case .success(let value):
            read = value
        }
        let facts = RefundFacts(
            status: read.status, capturedTotal: read.capturedTotal, refundedTotal: read.refundedAmount,
            refunds: read.refunds.map { RefundFacts.Seen(id: $0.refundID, amount: $0.refundedAmount ?? 0, reference: $0.reference) },
            currency: read.purchaseCurrency)
        switch RefundRules.beforeSending(
            intent, maxAttempts: settings.writeRetry.maxAttempts, longestCall: settings.longestCall, now: now, facts: facts)
        {
        case .readAgain(let at):
            change.intents = [intent.waiting(until: at, now: now)]
            try await commit(change, now: now)
            return Self.refundWaits(until: at, order)
        case .done(let refundID):
            change.events.append(
                NewEvent(
                    hppSessionID: order.hppSessionID, orderID: order.orderID,
                    DomainEvent(.resolved, "Klarna's order lists the refund with reference \(intent.reference ?? "—"): it was made"), detail: detail))
            return try await refunded(order, intent, refundID: refundID, currency: facts.currency, change: change)
        case .refuse(let reason):
            return try await refundEnded(
                order, intent.failed(reason, now: now), reason: reason, currency: facts.currency, change: change, detail: detail)
        case .send:
            break
        }
        if intent.needsResolution {
            change.events.append(
                NewEvent(
                    hppSessionID: order.hppSessionID, orderID: order.orderID,
                    DomainEvent(
                        .resolved,
                        "Klarna's order shows no refund with reference \(intent.reference ?? "—"): sending again with the same idempotency key"),
                    detail: detail))
            intent = intent.retrying(nil, at: now, now: now)
        }
        try await spendBudget(.inMotion)  // before the sent mark, as for every side effect
        now = clock.now
        change.intents = [intent]
        if let deferred = try await deferredSideEffect(change, "refund of order \(order.orderID)", now: now) { return deferred }
        intent = intent.sending(now: now)
        change.intents = [intent]
        change.events.append(
            NewEvent(
                hppSessionID: order.hppSessionID, orderID: order.orderID,
                DomainEvent(.attempt, "refunding \(intent.amount ?? 0), reference \(intent.reference ?? "—"), attempt \(intent.attempts)"),
                detail: detail.merging(["attempt": "\(intent.attempts)"]) { $1 }))
        try await commit(change, now: now)
        change = Change.answering(intent)

        let request = RefundRequest(refundedAmount: intent.amount ?? 0, reference: intent.reference, description: intent.refundDescription)
        let key = intent.key
        let id = order.orderID
        let result = try await klarna(
            &change, .inMotion, budgetSpent: true, { client in try await client.createRefund(orderID: id, request: request, idempotencyKey: key) })
        now = clock.now
        switch result {
        case .success(let refundID):
            return try await refunded(order, intent, refundID: refundID, currency: facts.currency, change: change)
        case .failure(let error):
            let errorDetail = Self.detail(error).merging(detail) { $1 }.merging(["attempt": "\(intent.attempts)"]) { $1 }
            let verdict = IntentVerdict.decide(
                intent: intent, failure: Self.callFailure(error), now: now, deadline: nil, policy: settings.writeRetry,
                createOrderSettle: settings.createOrderSettle, random: random)
            switch verdict {
            case .tryAgain(let next, let at, let event):
                // The wait is the intent's own: an open order's step in between must not send it early.
                change.intents = [next.waiting(until: at, now: now)]
                change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, event, detail: errorDetail))
                try await commit(change, now: now)
                return Self.refundWaits(until: at, order)
            case .giveUp(let ended, let reason) where ended.state == .ambiguous:
                // Out of attempts without a clear answer: one more read, once any attempt still on its way has
                // arrived, tells whether it was made (RefundRules.beforeSending); nothing is sent again.
                let at = now.addingTimeInterval(settings.longestCall.timeInterval)
                change.intents = [ended.waiting(until: at, now: now)]
                change.events.append(
                    NewEvent(
                        hppSessionID: order.hppSessionID, orderID: order.orderID,
                        DomainEvent(
                            .ambiguous,
                            "refund attempt \(intent.attempts) ended without a clear answer (\(Self.short(error))); \(reason): reading the order once more at \(TrackedSession.format(at)) to tell whether it was made"
                        ), detail: errorDetail))
                try await commit(change, now: now)
                return Self.refundWaits(until: at, order)
            case .giveUp(let ended, let reason):
                let why = "Klarna refused the refund of \(intent.amount ?? 0) on order \(id): \(Self.short(error)); \(reason)"
                return try await refundEnded(order, ended, reason: why, currency: facts.currency, change: change, detail: errorDetail)
            }
        }
    }

    private func refunded(_ order: TrackedOrder, _ intent: Intent, refundID: String?, currency: String?, change: Change) async throws -> StepResult {
        var change = change
        let now = clock.now
        let (outcome, ledger) = RefundRules.refunded(intent, refundID: refundID, order: order, currency: currency, now: now)
        change.intents = [intent.confirmed(result: refundID, now: now)]
        change.outcomes.append(outcome)
        change.ledgerRefunds.append(ledger)
        change.events.append(
            NewEvent(
                hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(.refunded, outcome.reason),
                detail: ["intent": intent.key, "refund_id": refundID ?? ""]))
        try await commit(change, now: now)
        return try await afterRefund(order)
    }

    /// A refund that ends without being made: failed, or still unclear after every attempt.
    private func refundEnded(
        _ order: TrackedOrder, _ ended: Intent, reason: String, currency: String?, change: Change, detail: [String: String]
    ) async throws -> StepResult {
        var change = change
        change.intents = [ended]
        let outcome = RefundRules.failed(ended, reason: reason, order: order, currency: currency)
        change.outcomes.append(outcome)
        change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(.refundFailed, reason), detail: detail))
        try await commit(change, now: clock.now)
        return try await afterRefund(order)
    }

    /// The read an intent makes before its next attempt (`reading`) failed once more: the intent waits with a growing
    /// backoff, its state unchanged, and the event filed under `owner` says what was read. Commits `change` with it;
    /// when to come back.
    func readBeforeAttemptFailed(
        _ intent: Intent, _ error: KlarnaAPIError, _ reading: String, owner: (session: String?, order: String?), detail: [String: String],
        change: Change
    ) async throws -> Date {
        var change = change
        let now = clock.now
        let failures = (intent.readFailures ?? 0) + 1
        let at = now.addingTimeInterval(readDelay(failures: failures, error).timeInterval)
        change.intents = [intent.readFailed(failures: failures, until: at, error: Self.short(error), now: now)]
        change.events.append(
            NewEvent(
                hppSessionID: owner.session, orderID: owner.order, DomainEvent(.readFailed, "\(reading) failed (\(Self.short(error))); trying again"),
                detail: detail.merging(Self.detail(error)) { $1 }))
        try await commit(change, now: now)
        return at
    }

    /// Back at `at` for the refund, or at the open order's own next step when that comes first (a refund waiting to
    /// retry never holds the order's reads back; that step comes back for the refund), as a side effect's work.
    static func refundWaits(until at: Date, _ order: TrackedOrder) -> StepResult {
        let due = order.isOpen ? min(at, order.nextDueAt ?? at) : at
        return StepResult(next: due, urgency: .inMotion)
    }

    /// At once when another refund waits; else the order's own plan.
    private func afterRefund(_ order: TrackedOrder) async throws -> StepResult {
        if try await pendingRefund(of: order.orderID) != nil { return StepResult(next: clock.now, urgency: .inMotion) }
        return StepResult(next: order.isOpen ? order.nextDueAt : nil)
    }
}
