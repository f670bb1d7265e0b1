import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Side effects as intents: placing the order and creating the customer token for an authorized session, capturing
/// and extending the authorization of an order. Each is persisted as `sent` before its call, so it happens at most
/// once; a failed call is judged by ``IntentVerdict``.
extension Reconciler {
    // MARK: Session intents

    /// Places the order or creates the customer token for an authorized session, exactly once. `carried` (what the
    /// read that authorized the session found) goes into this step's first commit, whichever path it takes.
    func driveSessionIntent(_ kind: SessionIntentKind, _ session: TrackedSession, carrying carried: Change) async throws -> StepResult {
        var now = clock.now
        let key = IdempotencyKey.make(kind.intentKind, session.kpSessionID)
        let stored = try await store.intent(key)
        var intent = stored ?? Intent(key: key, kind: kind.intentKind, subject: session.hppSessionID, now: now)
        var change = carried
        // Every commit that writes the intent requires it still as read (the answer's, still at its attempt): the
        // sessions of one KP session share it, so two of them cannot both mark it sent.
        change.intentRead = IntentVersion(key: key, read: stored)
        var paymentSession: PaymentSession?
        let urgency = Urgency.inMotion(now: now, deadline: session.tokenExpiresAt, margin: Urgency.tokenDeadlineMargin)

        if intent.isFinished {
            // A finished intent moves the session that finished it on in the same commit. This one is still
            // authorized: another session of the KP session drove the intent they share (the shop tracked the KP
            // session more than once), or the store was edited by hand. Nothing is sent; stop rather than guess.
            let maker = intent.subject == session.hppSessionID ? "" : ", made by its other HPP session \(intent.subject)"
            return try await closeSession(
                session, .needsAttention,
                "\(kind.intentKind.rawValue) for KP session \(session.kpSessionID) is \(intent.state.rawValue)\(intent.redacted.result.map { " (\($0))" } ?? "") (intent \(key)\(maker)) while this session is still authorized: another HPP session of the same KP session drove it, or the store was edited by hand; nothing is sent for this one",
                change: change)
        }
        if intent.needsResolution, kind == .customerToken {
            // Klarna has no read that shows whether a customer token was created.
            intent = intent.ambiguous(intent.lastError ?? "the daemon stopped after sending", now: now)
            change.intents = [intent]
            return try await closeSession(
                session, .needsAttention,
                "a customer token may have been created for KP session \(session.kpSessionID) but the answer was lost (intent \(key)); check the Merchant Portal",
                change: change)
        }
        // A create-order whose fate is unclear may still be on its way to Klarna: nothing is read or sent before its
        // settle period is over (the core's rule, CreateOrderSettle).
        switch CreateOrderSettle.step(
            for: intent, period: settings.createOrderSettle, longestCall: settings.longestCall, tokenExpiresAt: session.tokenExpiresAt, now: now)
        {
        case .proceed:
            break
        case .settle(let settling, let until, let event):
            change.intents = [settling]
            change.sessions = [session.waitingForIntent(until: until)]
            if let event {
                change.events.append(
                    NewEvent(
                        hppSessionID: session.hppSessionID, orderID: nil, event,
                        detail: [
                            "intent": key, "attempt": "\(settling.attempts)", "settle_until": TrackedSession.format(until),
                        ]))
            }
            try await commit(change, now: now)
            return StepResult(next: until)
        case .readKlarna:
            switch try await klarna(&change, urgency, { client in try await client.readPaymentSession(id: session.kpSessionID) }) {
            case .failure(let error):
                return try await sessionReadFailed(session, error, change: change)
            case .success(let kp) where kp.status == .complete:
                return try await linkPlacedOrder(session, intent, currency: kp.purchaseCurrency, urgency: urgency, change: change)
            case .success(let kp) where kp.status != .incomplete:
                intent = intent.ambiguous(intent.lastError ?? "the daemon stopped after sending", now: now)
                change.intents = [intent]
                return try await closeSession(
                    session, .needsAttention,
                    "create-order for KP session \(session.kpSessionID) ended without an answer and the KP session read shows \(kp.status.map { "status \($0.rawValue)" } ?? "no status"), not incomplete: whether Klarna placed the order is unknown, so none is placed again (intent \(key), \(intent.attempts) attempt(s)); look for it in the Merchant Portal by merchant reference \(session.merchantReference ?? "—")",
                    change: change)
            case .success(let kp):
                change.events.append(
                    NewEvent(
                        hppSessionID: session.hppSessionID, orderID: nil,
                        DomainEvent(
                            .resolved,
                            "KP session still incomplete after an unclear create-order and its settle period: no order exists and none is on its way, safe to try again"
                        ),
                        detail: ["intent": key]))
                intent = intent.retrying(nil, at: now, now: now)
                paymentSession = kp
            }
        }
        if let next = intent.nextAttemptAt, !now.hasReached(next) {
            change.sessions = [session.waitingForIntent(until: next)]
            change.intents = [intent]
            try await commit(change, now: now)
            return StepResult(next: next)
        }
        if let expiry = session.tokenExpiresAt, now.hasReached(expiry) {
            change.intents = [intent.failed("authorization token expired", now: now)]
            let lastError = intent.lastError ?? session.lastError
            let step = session.tokenExpired(now: now, detail: lastError.map { "last error: \($0)" } ?? "no attempt succeeded")
            record(step, into: &change)
            try await commit(change, now: now)
            return StepResult(next: nil)
        }
        if paymentSession == nil {
            switch try await klarna(&change, urgency, { client in try await client.readPaymentSession(id: session.kpSessionID) }) {
            case .failure(let error): return try await sessionReadFailed(session, error, change: change)
            case .success(let kp): paymentSession = kp
            }
        }
        guard let kp = paymentSession, let token = session.authorizationToken else {
            return try await closeSession(session, .needsAttention, "authorized session has no authorization token", change: change)
        }
        if let unusable = kp.unusable(for: kind.intentKind) { return try await closeSession(session, .needsAttention, unusable, change: change) }
        if kind == .placeOrder, kp.status == .complete {
            change.intents = [intent.failed("KP session already complete before the first attempt", now: now)]
            return try await closeSession(
                session, .needsAttention,
                "KP session \(session.kpSessionID) was already complete before this daemon placed an order: an order was placed for it elsewhere",
                change: change)
        }

        // The budget's wait comes before the sent mark, so the request leaves right after it: a sender that dies
        // after the mark was sending for at most the longest call (what CreateOrderSettle counts from).
        try await spendBudget(urgency)
        now = clock.now
        change.intents = [intent]
        if let deferred = try await deferredSideEffect(change, "\(kind.intentKind.rawValue) for KP session \(session.kpSessionID)", now: now) {
            return deferred
        }
        // Persist "sent" before the request leaves: a crash from here on is resolved by reading Klarna first.
        intent = intent.sending(now: now)
        change.intents = [intent]
        change.events.append(
            NewEvent(
                hppSessionID: session.hppSessionID, orderID: nil,
                DomainEvent(
                    .attempt, "\(kind == .placeOrder ? "placing the order" : "creating the customer token"), attempt \(intent.attempts)"),
                detail: ["intent": key, "attempt": "\(intent.attempts)"]))
        try await commit(change, now: now)
        change = Change.answering(intent)

        switch kind {
        case .placeOrder:
            let order = try CreateOrderRequest(session: kp, merchantReference: session.merchantReference)
            let result = try await klarna(
                &change, urgency, budgetSpent: true,
                { client in try await client.createOrder(authorizationToken: token, order: order, idempotencyKey: key) })
            now = clock.now
            switch result {
            case .success(let created):
                change.intents = [intent.confirmed(result: created.orderID, now: now)]
                let step = session.orderPlaced(orderID: created.orderID, fraudStatus: created.fraudStatus)
                record(step, into: &change, detail: ["intent": key, "attempt": "\(intent.attempts)"])
                if let handOff = step.handOff {
                    // The answer tells what an OM read would: capture now, or nothing to do (one call fewer). An order
                    // that waits for capture requests is read for its authorization's expiry.
                    self.handOff(
                        step.session.order(for: handOff, createdAt: now), fraudStatus: created.fraudStatus, amount: kp.orderAmount,
                        currency: kp.purchaseCurrency, now: now, into: &change)
                }
                try await commit(change, now: now)
                return StepResult(next: nil, wake: [.order(created.orderID)])
            case .failure(let error):
                return try await sessionIntentFailed(kind, session, intent, error, change: change)
            }
        case .customerToken:
            let request = try CustomerTokenRequest(session: kp, description: settings.customerTokenDescription)
            let result = try await klarna(
                &change, urgency, budgetSpent: true,
                { client in try await client.createCustomerToken(authorizationToken: token, request: request, idempotencyKey: key) })
            now = clock.now
            switch result {
            case .success(let created):
                change.intents = [intent.confirmed(result: created.tokenID, now: now)]
                let step = session.customerTokenCreated(tokenID: created.tokenID, now: now)
                record(step, into: &change, detail: ["intent": key])
                try await commit(change, now: now)
                return StepResult(next: step.session.nextDueAt)
            case .failure(let error):
                return try await sessionIntentFailed(kind, session, intent, error, change: change)
            }
        }
    }

    private func sessionIntentFailed(
        _ kind: SessionIntentKind, _ session: TrackedSession, _ intent: Intent, _ error: KlarnaAPIError, change: Change
    ) async throws -> StepResult {
        var change = change
        let now = clock.now
        let detail = Self.detail(error).merging(["intent": intent.key, "attempt": "\(intent.attempts)"]) { $1 }
        switch verdict(intent, error, now: now, deadline: session.tokenExpiresAt) {
        case .tryAgain(let next, let at, let event):
            change.intents = [next]
            change.sessions = [session.waitingForIntent(until: at, lastError: Self.short(error))]
            var settling = detail
            if let until = next.settleUntil { settling["settle_until"] = TrackedSession.format(until) }
            change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, event, detail: settling))
            try await commit(change, now: now)
            return StepResult(next: at)
        case .giveUp(let failed, let reason):
            change.intents = [failed]
            let (outcome, why) = SessionIntentRules.giveUp(
                kind, status: error.status, errorCode: error.errorCode, error: Self.short(error), retryReason: reason)
            change.events.append(NewEvent(hppSessionID: session.hppSessionID, orderID: nil, DomainEvent(.failed, why), detail: detail))
            return try await closeSession(session, outcome, why, change: change)
        }
    }

    /// What a failed side-effect call means for its intent (the core's rules, with this engine's retry settings).
    private func verdict(_ intent: Intent, _ error: KlarnaAPIError, now: Date, deadline: Date?) -> IntentVerdict {
        IntentVerdict.decide(
            intent: intent, failure: Self.callFailure(error), now: now, deadline: deadline, policy: settings.writeRetry,
            createOrderSettle: settings.createOrderSettle, random: random)
    }

    func sessionReadFailed(_ session: TrackedSession, _ error: KlarnaAPIError, change: Change) async throws -> StepResult {
        var change = change
        let now = clock.now
        let step = session.readFailed(
            Self.short(error), now: now, retryAfter: readDelay(failures: session.consecutiveFailures + 1, error), schedule: settings.polling)
        record(step, into: &change, detail: Self.detail(error))
        try await commit(change, now: now)
        return StepResult(next: step.session.nextDueAt)
    }

    func closeSession(_ session: TrackedSession, _ kind: OutcomeKind, _ reason: String, change: Change) async throws -> StepResult {
        var change = change
        record(session.closed(kind, reason), into: &change)
        try await commit(change, now: clock.now)
        return StepResult(next: nil)
    }

    // MARK: Order intents

    /// Captures or extends the authorization, exactly once per key.
    func driveOrderIntent(_ order: TrackedOrder, _ intent: Intent) async throws -> StepResult {
        var intent = intent
        var change = Change()
        var now = clock.now
        guard case .order(let kind) = intent.kind.target else {
            // Only a store edited by hand holds a session's intent on an order: stop rather than guess.
            record(order.intentFailed("intent \(intent.key) (\(intent.kind.rawValue)) is not an order's side effect"), into: &change)
            try await commit(change, now: now)
            return StepResult(next: nil)
        }
        let urgency = order.sideEffectUrgency(now: now, deadlines: settings.deadlines)
        if intent.needsResolution {
            switch try await klarna(&change, urgency, { client in try await client.readOrder(id: order.orderID) }) {
            case .failure(let error):
                return try await orderReadFailed(order, error, now: now, change: change)
            case .success(let read):
                let facts = OrderFacts(
                    status: read.status, capturedTotal: read.capturedTotal, remainingAuthorizedAmount: read.remainingAuthorizedAmount,
                    expiresAt: read.expiresAt)
                if OrderIntentRules.isDone(kind, facts: facts, expectedCapturedTotal: intent.expectedCapturedTotal, knownExpiry: order.expiresAt) {
                    let claimed = try await store.intents(subject: order.orderID)
                        .filter { $0.kind == .capture && $0.state == .confirmed && $0.key != intent.key }.compactMap(\.result)
                    let captureID = intent.resolvedCaptureID(among: OrderMovements(read, orderID: order.orderID).captures, claimed: Set(claimed))
                    change.events.append(
                        NewEvent(
                            hppSessionID: order.hppSessionID, orderID: order.orderID,
                            DomainEvent(
                                .resolved, "Klarna's order shows the \(intent.kind.rawValue) was done"), detail: ["intent": intent.key]))
                    return try await orderIntentSucceeded(kind, order, intent, captureID: captureID, change: change)
                }
                change.events.append(
                    NewEvent(
                        hppSessionID: order.hppSessionID, orderID: order.orderID,
                        DomainEvent(
                            .resolved, "Klarna's order shows no \(intent.kind.rawValue) yet: sending again with the same idempotency key"),
                        detail: ["intent": intent.key]))
                intent = intent.retrying(nil, at: now, now: now)
            }
        }
        if let next = intent.nextAttemptAt, !now.hasReached(next) {
            change.orders = [order.waitingForIntent(until: next)]
            change.intents = [intent]
            try await commit(change, now: now)
            return StepResult(next: next)
        }
        try await spendBudget(urgency)  // before the sent mark, as for the session's intents
        now = clock.now
        change.intents = [intent]
        if let deferred = try await deferredSideEffect(change, "\(intent.kind.rawValue) of order \(order.orderID)", now: now) { return deferred }
        intent = intent.sending(now: now)
        change.intents = [intent]
        let what =
            switch kind {
            case .capture: "capturing \(intent.amount ?? 0)"
            case .cancelOrder: "cancelling the order"
            case .releaseRemaining: "releasing the remaining authorization"
            case .extendAuthorization: "extending the authorization"
            }
        change.events.append(
            NewEvent(
                hppSessionID: order.hppSessionID, orderID: order.orderID, DomainEvent(.attempt, "\(what), attempt \(intent.attempts)"),
                detail: ["intent": intent.key, "attempt": "\(intent.attempts)"]))
        try await commit(change, now: now)
        change = Change.answering(intent)

        let key = intent.key
        let result: Result<String?, KlarnaAPIError>
        let id = order.orderID
        switch kind {
        case .capture:
            let request = CaptureRequest(capturedAmount: intent.amount ?? 0, reference: order.merchantReference)
            result = try await klarna(
                &change, urgency, budgetSpent: true,
                { client in try await client.createCapture(orderID: id, request: request, idempotencyKey: key).captureID })
        case .cancelOrder:
            result = try await klarna(
                &change, urgency, budgetSpent: true, { client in try await client.cancelOrder(orderID: id, idempotencyKey: key) }
            ).map {
                nil
            }
        case .releaseRemaining:
            result = try await klarna(
                &change, urgency, budgetSpent: true, { client in try await client.releaseRemainingAuthorization(orderID: id, idempotencyKey: key) }
            ).map { nil }
        case .extendAuthorization:
            result = try await klarna(
                &change, urgency, budgetSpent: true, { client in try await client.extendAuthorizationTime(orderID: id, idempotencyKey: key) }
            ).map { nil }
        }
        now = clock.now
        switch result {
        case .success(let captureID):
            return try await orderIntentSucceeded(kind, order, intent, captureID: captureID, change: change)
        case .failure(let error):
            let detail = Self.detail(error).merging(["intent": key, "attempt": "\(intent.attempts)"]) { $1 }
            switch verdict(intent, error, now: now, deadline: nil) {
            case .tryAgain(let next, let at, let event):
                change.intents = [next]
                change.orders = [order.waitingForIntent(until: at)]
                change.events.append(NewEvent(hppSessionID: order.hppSessionID, orderID: order.orderID, event, detail: detail))
                try await commit(change, now: now)
                return StepResult(next: at)
            case .giveUp(let failed, let reason):
                change.intents = [failed]
                if let requestID = intent.captureRequestID {
                    change.finishedCaptureRequests.append((requestID, .refused, Self.short(error)))
                }
                switch OrderIntentRules.giveUp(kind, status: error.status) {
                case .waitForOperator:
                    // `retry` reads the order again; a cancel or release may be asked for again.
                    record(
                        order.intentFailed("\(intent.kind.rawValue) asked by an operator did not happen: \(Self.short(error)); \(reason)"),
                        into: &change, detail: detail)
                    try await commit(change, now: now)
                    return StepResult(next: nil)
                case .readOrder:
                    record(order.intentRefused(intent.kind, error: Self.short(error), now: now), into: &change, detail: detail)
                    try await commit(change, now: now)
                    return StepResult(next: now)
                case .fail:
                    record(order.intentFailed("\(intent.kind.rawValue) failed: \(Self.short(error)); \(reason)"), into: &change, detail: detail)
                    try await commit(change, now: now)
                    return StepResult(next: nil)
                }
            }
        }
    }

    private func orderIntentSucceeded(
        _ kind: OrderIntentKind, _ order: TrackedOrder, _ intent: Intent, captureID: String?, change: Change
    ) async throws -> StepResult {
        var change = change
        let now = clock.now
        change.intents = [intent.confirmed(result: captureID, now: now)]
        let step: OrderStep
        switch kind {
        case .capture:
            step = order.captureConfirmed(amount: intent.amount ?? 0, captureID: captureID, now: now)
            if let requestID = intent.captureRequestID { change.finishedCaptureRequests.append((requestID, .done, "captured \(intent.amount ?? 0)")) }
        case .cancelOrder: step = order.cancelledOnRequest()
        case .releaseRemaining: step = order.remainingReleased()
        case .extendAuthorization: step = order.authorizationExtended(now: now)
        }
        record(step, into: &change, detail: ["intent": intent.key, "attempt": "\(intent.attempts)"])
        try await commit(change, now: now)
        return StepResult(next: step.order.isOpen ? step.order.nextDueAt : nil)
    }
}
