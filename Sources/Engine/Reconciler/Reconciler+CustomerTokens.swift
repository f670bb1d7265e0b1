import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Intents on customer tokens. Charges (renewals): one intent each, a unit of its own until Klarna placed its order, which is
/// then followed like any order. The token is read before the first attempt; every attempt sends the body built when
/// the charge was recorded with the same `Klarna-Idempotency-Key`, which Klarna answers the same way for 24 hours, so
/// an unclear answer is resolved by sending again inside that window and never by a second charge after it.
extension Reconciler {
    /// One step of the intent on a customer token recorded under `key`: a charge, or the token's cancellation.
    func processTokenIntent(_ key: String) async throws -> StepResult {
        guard let intent = try await store.intent(key), !intent.isFinished else { return StepResult(next: nil) }
        return try await on(intent.ownAccount) {
            switch intent.kind {
            case .charge where intent.charge != nil: try await driveCharge(intent)
            case .cancelToken: try await driveTokenCancel(intent)
            default:
                // Only a store edited by hand holds another intent under a token's key: stop rather than guess.
                try await chargeEnded(
                    intent.failed("not an intent on a customer token", now: clock.now), .needsAttention,
                    reason: "intent \(intent.key) (\(intent.kind.rawValue)) is not a charge or a token's cancellation", change: Change(), detail: [:])
            }
        }
    }

    private func driveCharge(_ intent: Intent) async throws -> StepResult {
        var intent = intent
        var change = Change()
        var now = clock.now
        if let next = intent.nextAttemptAt, !now.hasReached(next) { return StepResult(next: next, urgency: .renewal) }
        let token = intent.subject
        let detail = Self.chargeDetail(intent)

        if intent.needsResolution {
            guard ChargeRules.maySendAgain(intent, longestCall: settings.longestCall, now: now) else {
                return try await chargeUnclear(intent, change: change, detail: detail)
            }
            // Klarna answers the same key the same way within its window: sending again is how a lost answer is read.
            change.events.append(
                NewEvent(
                    hppSessionID: nil, orderID: nil,
                    DomainEvent(
                        .resolved,
                        "charge \(intent.reference ?? "—") attempt \(intent.attempts) ended without a clear answer: sending again with the same idempotency key, which Klarna answers the same way"
                    ), detail: detail))
            intent = intent.retrying(nil, at: now, now: now)
        } else if intent.attempts == 0 {
            // Before the first attempt only: a token that is not active is not charged, and nothing is sent.
            switch try await klarna(&change, .renewal, { client in try await client.readCustomerToken(token) }) {
            case .failure(let error) where error.answer.endsWhatWasRead:
                let reason = "Klarna does not know customer token \(Redact.tail(token)) (\(Self.short(error))): nothing was charged"
                return try await chargeEnded(
                    intent.failed(Self.short(error), now: now), .chargeFailed, reason: reason, error: error, change: change,
                    detail: detail.merging(Self.detail(error)) { $1 })
            case .failure(let error):
                let at = try await readBeforeAttemptFailed(
                    intent, error, "reading customer token \(Redact.tail(token)) before charging", owner: (nil, nil), detail: detail, change: change)
                return StepResult(next: at, urgency: .renewal)
            case .success(let read):
                if let refusal = ChargeRules.refusal(tokenStatus: read.status) {
                    return try await chargeEnded(intent.failed(refusal, now: now), .chargeFailed, reason: refusal, change: change, detail: detail)
                }
            }
        }

        switch try await markSent(
            intent, carrying: change, what: "charge \(intent.reference ?? intent.key)",
            event: { sent in
                NewEvent(
                    hppSessionID: nil, orderID: nil,
                    DomainEvent(
                        .attempt,
                        "charging \(sent.amount ?? 0) \(sent.charge?.currency ?? "") to customer token \(Redact.tail(token)), reference \(sent.reference ?? "—"), attempt \(sent.attempts)"
                    ), detail: detail.merging(["attempt": "\(sent.attempts)"]) { $1 })
            })
        {
        case .deferred(let result): return result
        case .sent(let sent, let answering):
            intent = sent
            change = answering
        }
        let key = intent.key
        let body = intent.charge?.body ?? ""
        let result = try await klarna(
            &change, .renewal, budgetSpent: true, { client in try await client.chargeCustomerToken(token, body: body, idempotencyKey: key) })
        now = clock.now
        switch result {
        case .success(let created):
            return try await chargePlaced(intent, created, change: change, detail: detail)
        case .failure(let error):
            return try await chargeFailed(intent, error, change: change, detail: detail.merging(["attempt": "\(intent.attempts)"]) { $1 })
        }
    }

    /// Klarna placed the charge's order: the charge is done, and its order is followed from here like any other (an
    /// accepted order is captured at once by an `immediate` policy, without a read).
    private func chargePlaced(_ intent: Intent, _ created: CreateOrderResponse, change: Change, detail: [String: String]) async throws -> StepResult {
        var change = change
        let now = clock.now
        let order = ChargeRules.order(intent, orderID: created.orderID, now: now)
        change.intents = [intent.confirmed(result: created.orderID, now: now)]
        let reason =
            "Klarna placed order \(created.orderID) for charge \(intent.reference ?? "—") of \(intent.amount ?? 0) \(intent.charge?.currency ?? ""), fraud_status \(created.fraudStatus?.rawValue ?? "not given")"
        change.outcomes.append(
            ChargeRules.outcome(.chargePlaced, reason, intent, orderID: created.orderID, fraudStatus: created.fraudStatus?.rawValue))
        change.events.append(
            NewEvent(
                hppSessionID: nil, orderID: created.orderID, DomainEvent(.chargePlaced, reason),
                detail: detail.merging(["order_id": created.orderID]) { $1 }))
        handOff(order, fraudStatus: created.fraudStatus, amount: intent.amount, currency: intent.charge?.currency, now: now, into: &change)
        try await commit(change, now: now)
        return StepResult(next: nil, wake: [.order(created.orderID)], wakeUrgency: .renewal)
    }

    /// Klarna's refusal, or no clear answer: a decline or a final refusal ends the charge; anything else is sent again
    /// with the same key, within Klarna's window.
    private func chargeFailed(_ intent: Intent, _ error: KlarnaAPIError, change: Change, detail: [String: String]) async throws -> StepResult {
        let now = clock.now
        let errorDetail = Self.detail(error).merging(detail) { $1 }
        if case .http(let status) = error.failure {
            switch ChargeRules.refusal(status: status, fraudStatus: error.fraudStatus, reason: error.reason) {
            case .declined:
                let why = [error.fraudStatus.map { "fraud_status \($0)" }, error.reason.map { "reason \($0)" }].compactMap { $0 }
                let reason =
                    "Klarna declined charge \(intent.reference ?? "—") of \(intent.amount ?? 0) \(intent.charge?.currency ?? "") (\(Self.short(error))\(why.isEmpty ? "" : "; " + why.joined(separator: ", ")), correlation id \(error.klarnaCorrelationID ?? "not given")): final for this reference"
                return try await chargeEnded(
                    intent.failed(Self.short(error), now: now), .chargeDeclined, reason: reason, error: error, change: change, detail: errorDetail)
            case .failed:
                let reason = "Klarna refused charge \(intent.reference ?? "—") (\(Self.short(error))): not charged"
                return try await chargeEnded(
                    intent.failed(Self.short(error), now: now), .chargeFailed, reason: reason, error: error, change: change, detail: errorDetail)
            case .retry:
                break
            }
        }
        // Sent again with the same key until Klarna's window closes: no attempt cap short of it.
        let window = intent.charge?.firstSentAt.map { $0.addingTimeInterval((ChargeRules.idempotencyWindow - settings.longestCall).timeInterval) }
        var policy = settings.writeRetry
        policy.maxAttempts = .max
        policy.deadline = nil
        switch IntentVerdict.decide(
            intent: intent, failure: Self.callFailure(error), now: now, deadline: window, policy: policy,
            createOrderSettle: settings.createOrderSettle, random: random)
        {
        case .tryAgain(let next, let at, let event):
            return try await tryAgain(next, at: at, event, change: change, detail: errorDetail)
        case .giveUp(let ended, _) where ended.state == .ambiguous:
            return try await chargeUnclear(ended, change: change, detail: errorDetail)
        case .giveUp(let ended, let reason):
            let why = "Klarna refused charge \(intent.reference ?? "—") (\(Self.short(error))); \(reason): not charged"
            return try await chargeEnded(ended, .chargeFailed, reason: why, error: error, change: change, detail: errorDetail)
        }
    }

    /// No clear answer within Klarna's window: the key no longer tells, and a second charge is never made. The order is
    /// looked for where Klarna names orders by the merchant reference (an OM notification, a settlement SALE), as for
    /// an unclear create-order; found, it is followed; else an operator looks for it.
    private func chargeUnclear(_ intent: Intent, change: Change, detail: [String: String]) async throws -> StepResult {
        var change = change
        // What this step writes of the charge requires it still unfinished at its last attempt: a commit that landed and
        // lost its answer, tried again, writes its outcome once (the step after an attempt has that guard already).
        if change.intentRead == nil { change.intentRead = Change.answering(intent).intentRead }
        let reference = intent.charge?.merchantReference ?? intent.reference ?? "—"
        let found: PlacedOrderClues
        switch try await placedOrderClues(
            merchantReference: reference, account: intent.ownAccount, since: intent.createdAt, urgency: .renewal, change: &change)
        {
        case .success(let clues): found = clues
        case .failure(let error):
            let at = try await readBeforeAttemptFailed(
                intent, error, "reading an order while looking for the order of charge \(intent.reference ?? "—")", owner: (nil, nil), detail: detail,
                change: change)
            return StepResult(next: at, urgency: .renewal)
        }
        let now = clock.now
        switch PlacedOrderSearch.verdict(
            hppOrderID: nil, clues: found.clues, merchantReference: reference, currency: intent.charge?.currency, searched: found.searched)
        {
        case .found(let orderID, let how, let sources):
            // Its answer was lost; its fraud status is not known, so the order is read before anything is captured.
            change.intents = [intent.confirmed(result: orderID, now: now)]
            let reason =
                "Klarna placed order \(orderID) for charge \(intent.reference ?? "—") of \(intent.amount ?? 0) \(intent.charge?.currency ?? ""), its answer lost: \(how)"
            change.outcomes.append(ChargeRules.outcome(.chargePlaced, reason, intent, orderID: orderID))
            change.events.append(
                NewEvent(
                    hppSessionID: nil, orderID: orderID, DomainEvent(.chargePlaced, reason),
                    detail: detail.merging(["order_id": orderID, "found_in": sources.map(\.word).joined(separator: ",")]) { $1 }))
            change.newOrders.append(ChargeRules.order(intent, orderID: orderID, now: now))
            try await commit(change, now: now)
            return StepResult(next: nil, wake: [.order(orderID)], wakeUrgency: .renewal)
        case .notFound(let why):
            let reason =
                "charge \(intent.reference ?? "—") got no clear answer in \(intent.attempts) attempt(s) within Klarna's 24 hours of idempotency (last: \(intent.lastError ?? "no answer")): Klarna may have placed its order, so it is not sent again; \(why); look for an order with merchant_reference1 \(reference) in the Merchant Portal before charging again with a new reference"
            var ended = intent.failed(intent.lastError ?? "no clear answer within Klarna's 24 hours", now: now)
            ended.lastError = "unclear: no answer within Klarna's 24 hours; Klarna may have placed the order"
            return try await chargeEnded(ended, .needsAttention, reason: reason, change: change, detail: detail)
        }
    }

    /// The charge ends without an order of its own: declined, failed, or left to an operator.
    private func chargeEnded(
        _ ended: Intent, _ kind: OutcomeKind, reason: String, error: KlarnaAPIError? = nil, change: Change, detail: [String: String]
    ) async throws -> StepResult {
        var change = change
        change.intents = [ended]
        var outcome = ChargeRules.outcome(kind, reason, ended)
        outcome.klarnaErrorCode = error?.errorCode
        outcome.klarnaCorrelationID = error?.klarnaCorrelationID
        change.outcomes.append(outcome)
        change.events.append(NewEvent(hppSessionID: nil, orderID: nil, DomainEvent(EventKind(kind), reason), detail: detail))
        try await commit(change, now: clock.now)
        return StepResult(next: nil)
    }

    /// A token's cancellation, asked for by an operator: sent until Klarna answers (a status it keeps, so sending again
    /// changes nothing), then `customer_token_cancelled`; Klarna's refusal, or no clear answer after every attempt, is a
    /// person's to look at.
    private func driveTokenCancel(_ intent: Intent) async throws -> StepResult {
        var intent = intent
        var now = clock.now
        if let next = intent.nextAttemptAt, !now.hasReached(next) { return StepResult(next: next, urgency: .renewal) }
        let token = intent.subject
        let detail = ["intent": intent.key, "customer_token": Redact.tail(token)]
        var change: Change
        switch try await markSent(
            intent, carrying: Change(), what: "cancellation of customer token \(Redact.tail(token))",
            event: { sent in
                NewEvent(
                    hppSessionID: nil, orderID: nil,
                    DomainEvent(.attempt, "cancelling customer token \(Redact.tail(token)), attempt \(sent.attempts)"),
                    detail: detail.merging(["attempt": "\(sent.attempts)"]) { $1 })
            })
        {
        case .deferred(let result): return result
        case .sent(let sent, let answering):
            intent = sent
            change = answering
        }
        let key = intent.key
        let result = try await klarna(
            &change, .renewal, budgetSpent: true, { client in try await client.cancelCustomerToken(token, idempotencyKey: key) })
        now = clock.now
        switch result {
        case .success:
            change.intents = [intent.confirmed(result: nil, now: now)]
            let reason = "Klarna cancelled customer token \(Redact.tail(token)): nothing more is charged from it"
            change.outcomes.append(TokenCancelRules.outcome(.customerTokenCancelled, reason, intent))
            change.events.append(NewEvent(hppSessionID: nil, orderID: nil, DomainEvent(.customerTokenCancelled, reason), detail: detail))
            try await commit(change, now: now)
            return StepResult(next: nil)
        case .failure(let error):
            let errorDetail = Self.detail(error).merging(detail) { $1 }
            switch IntentVerdict.decide(
                intent: intent, failure: Self.callFailure(error), now: now, deadline: nil, policy: settings.writeRetry,
                createOrderSettle: settings.createOrderSettle, random: random)
            {
            case .tryAgain(let next, let at, let event):
                return try await tryAgain(next, at: at, event, change: change, detail: errorDetail)
            case .giveUp(let ended, let reason):
                change.intents = [ended]
                let why = "customer token \(Redact.tail(token)) was not cancelled: Klarna answered \(Self.short(error)); \(reason)"
                change.outcomes.append(TokenCancelRules.outcome(.needsAttention, why, ended))
                change.events.append(NewEvent(hppSessionID: nil, orderID: nil, DomainEvent(.needsAttention, why), detail: errorDetail))
                try await commit(change, now: now)
                return StepResult(next: nil)
            }
        }
    }

    /// The intent is sent again at `at` (its own wait: an unclear or refused attempt), with `event` saying why.
    private func tryAgain(_ next: Intent, at: Date, _ event: DomainEvent, change: Change, detail: [String: String]) async throws -> StepResult {
        var change = change
        let now = clock.now
        change.intents = [next.waiting(until: at, now: now)]
        change.events.append(NewEvent(hppSessionID: nil, orderID: nil, event, detail: detail))
        try await commit(change, now: now)
        return StepResult(next: at, urgency: .renewal)
    }

    enum SendMark {
        /// Marked sent, committed: the request leaves now; its answer goes into this change.
        case sent(Intent, answering: Change)
        /// Not sent now (a stop begun, disk pressure): the step comes back.
        case deferred(StepResult)
    }

    /// Waits for the account's budget at a renewal's level, then commits `intent` marked sent with `change` and the
    /// event `event` makes of the sent intent, right before its request leaves; or defers it (``deferredSideEffect``).
    private func markSent(_ intent: Intent, carrying change: Change, what: String, event: (Intent) -> NewEvent) async throws -> SendMark {
        try await spendBudget(.renewal)  // before the sent mark, as for every side effect
        let now = clock.now
        var change = change
        change.intents = [intent]
        if let deferred = try await deferredSideEffect(change, what, now: now) {
            return .deferred(StepResult(next: deferred.next, urgency: .renewal))
        }
        let sent = intent.sending(now: now)
        change.intents = [sent]
        change.events.append(event(sent))
        try await commit(change, now: now)
        return .sent(sent, answering: Change.answering(sent))
    }

    /// What every event of a charge carries: its key, the shop's reference and the token's tail.
    private static func chargeDetail(_ intent: Intent) -> [String: String] {
        ["intent": intent.key, "charge_reference": intent.reference ?? "", "customer_token": Redact.tail(intent.subject)]
    }
}
