import Foundation
import KlarnaAPI
import ReconcilerCore
import ReconcilerStore

/// Placed orders: reading them and turning what the order rules decide (capture, refuse a request, extend the
/// authorization) into intents.
extension Reconciler {
    /// The order's own side effect under way first; then refunds (which run whatever the order's phase), except that
    /// a hint about an open order is its own read's first; then the order's own step.
    func processOrder(_ id: String, hinted: Bool) async throws -> StepResult {
        guard let order = try await store.order(id) else { return StepResult(next: nil) }
        return try await on(order.account) {
            try await processLoadedOrder(order, hinted: hinted)
        }
    }

    private func processLoadedOrder(_ order: TrackedOrder, hinted: Bool) async throws -> StepResult {
        let id = order.orderID
        return try await LogContext.about(order) {
            let ownFirst = order.isOpen && (order.activeIntent != nil || hinted)
            // Read before the step commits anything (on PostgreSQL it came with the step's inputs). A refund recorded
            // while the step runs is not missed: its ingest wakes the key, which then runs again.
            let refund = try await pendingRefund(of: id)
            if !ownFirst, let refund {
                guard order.isOpen, let due = refund.nextAttemptAt, !isDue(due) else { return try await driveRefund(order, refund) }
            }
            guard order.isOpen else { return StepResult(next: nil) }
            var result = try await processOrder(order, hinted: hinted)
            // A refund waiting for its turn or its retry brings the key back when it is due, and when the order ended
            // in this step; while the order's own side effect lasts it waits behind it (the key comes back for that).
            let waiting = refund
            let latest: TrackedOrder = if case .order(let committed)? = Self.committed?.value { committed } else { order }
            if let waiting, latest.activeIntent == nil || result.next == nil {
                let due = max(clock.now, waiting.nextAttemptAt ?? clock.now)
                result.next = result.next.map { min($0, due) } ?? due
                result.urgency = .inMotion
            }
            return result
        }
    }

    /// The intent `key` of order `orderID`, read with the order's other intents: before the step's first commit
    /// they came with its inputs, so that finding none costs no read (a read by key would ask the store).
    private func orderIntent(_ key: String, of orderID: String) async throws -> Intent? {
        try await store.intents(subject: orderID).first { $0.key == key }
    }

    private func processOrder(_ loaded: TrackedOrder, hinted: Bool) async throws -> StepResult {
        var order = loaded
        let id = order.orderID
        if hinted, order.activeIntent == nil { order = order.hinted(now: clock.now) }
        if let key = order.activeIntent, let intent = try await store.intent(key), !intent.isFinished {
            return try await driveOrderIntent(order, intent)
        }
        if let due = order.nextDueAt, !isDue(due) { return StepResult(next: due) }
        var change = Change()
        let phaseUrgency = order.urgency(now: clock.now, deadlines: settings.deadlines)
        let result = try await klarna(&change, hinted ? max(.hinted, phaseUrgency) : phaseUrgency, { client in try await client.readOrder(id: id) })
        let now = clock.now
        let read: KlarnaAPI.Order
        switch result {
        case .failure(let error) where error.answer.endsWhatWasRead:
            record(
                order.closed(.needsAttention, "Klarna does not know order \(id) (\(Self.short(error)))"), into: &change, detail: Self.detail(error))
            try await commit(change, now: now)
            return StepResult(next: nil)
        case .failure(let error):
            return try await orderReadFailed(order, error, now: now, change: change)
        case .success(let value):
            read = value
        }
        if order.reads == 0, let mismatch = order.namedOrderMismatch(merchantReferenceAtKlarna: read.merchantReference1) {
            record(order.closed(.needsAttention, mismatch), into: &change)
            try await commit(change, now: now)
            return StepResult(next: nil)
        }
        let observation: OrderObservation
        switch Self.observation(read, of: order) {
        case .success(let value):
            observation = value
        case .failure(let missing):
            let reason =
                "Klarna's read of order \(id) lacks \(missing.fields.joined(separator: ", ")), which the order rules decide with: nothing was captured on it; `retry` reads it again"
            record(order.closed(.needsAttention, reason), into: &change)
            try await commit(change, now: now)
            return StepResult(next: nil)
        }
        let request = order.capturePolicy == .onRequest ? try await store.oldestCaptureRequest(orderID: id) : nil
        var step = order.applying(observation, request: request, now: now, deadlines: settings.deadlines)

        var intent: Intent?
        switch step.action {
        case nil:
            break
        case .refuseRequest(let requestID, let reason):
            change.finishedCaptureRequests.append((requestID, .refused, reason))
            step.events.append(DomainEvent(.captureRefused, reason))
        case .capture(let amount, let requestID):
            let target =
                requestID.map { id in "\(order.orderID):request-\(id)-\(request.map { Int($0.requestedAt.timeIntervalSince1970 * 1_000) } ?? 0)" }
                ?? "\(order.orderID):full"
            let key = IdempotencyKey.make(.capture, target)
            let existing = try await orderIntent(key, of: order.orderID)
            if let existing, existing.isFinished {
                if let requestID {
                    change.finishedCaptureRequests.append((requestID, .refused, "an earlier capture with this key ended \(existing.state.rawValue)"))
                }
                let reason =
                    "Klarna still shows \(observation.remainingAuthorizedAmount) to capture but capture \(key) already ended \(existing.state.rawValue): \(existing.lastError ?? "")"
                step = step.order.closed(.needsAttention, reason).merging(before: step)
            } else {
                intent =
                    existing
                    ?? Intent(
                        key: key, kind: .capture, subject: order.orderID, amount: amount,
                        expectedCapturedTotal: observation.capturedAmount + amount, captureRequestID: requestID, now: now)
                step.order = step.order.intentStarted(key: key, now: now)
            }
        case .extendAuthorization:
            let day = read.expiresAt.map { KlarnaJSON.formatDate($0).prefix(10) } ?? "unknown"
            let key = IdempotencyKey.make(.extendAuthorization, "\(order.orderID):\(day)")
            if try await orderIntent(key, of: order.orderID) == nil {
                intent = Intent(key: key, kind: .extendAuthorization, subject: order.orderID, now: now)
                step.order = step.order.intentStarted(key: key, now: now)
            }
        }
        record(step, into: &change)
        if let intent { change.intents.append(intent) }
        try await commit(change, now: now)
        if let intent { return try await driveOrderIntent(step.order, intent) }
        return StepResult(next: step.order.isOpen ? step.order.nextDueAt : nil)
    }

    /// A new order Klarna accepted at once: the capture policy's decision, with the capture intent it starts (the
    /// same key a read would have led to), ready to commit with the order. `amount` is what the consumer authorized;
    /// without it the answer tells too little, and the new order is read from OM before anything is decided.
    /// An order Klarna just placed, into `change` as new: one its answer said `ACCEPTED` is captured at once by an
    /// `immediate` policy (or closed by `never`) without an OM read; any other is read first.
    func handOff(_ order: TrackedOrder, fraudStatus: FraudStatus?, amount: Int?, currency: String?, now: Date, into change: inout Change) {
        if fraudStatus == .accepted, order.capturePolicy != .onRequest {
            let (placed, capture) = acceptedOrder(order, amount: amount, currency: currency, now: now)
            record(placed, into: &change, asNew: true)
            if let capture { change.intents.append(capture) }
        } else {
            change.newOrders.append(order)
        }
    }

    func acceptedOrder(_ order: TrackedOrder, amount: Int?, currency: String?, now: Date) -> (step: OrderStep, capture: Intent?) {
        guard let amount else { return (OrderStep(order: order), nil) }
        var step = order.placedAndAccepted(amount: amount, currency: currency, now: now, deadlines: settings.deadlines)
        guard case .capture(let amount, nil) = step.action else { return (step, nil) }
        let key = IdempotencyKey.make(.capture, "\(order.orderID):full")
        step.order = step.order.intentStarted(key: key, now: now)
        return (step, Intent(key: key, kind: .capture, subject: order.orderID, amount: amount, expectedCapturedTotal: amount, now: now))
    }

    /// What a read of `order` shows, as the order rules take it, or the fields they decide with that it lacks (the
    /// spec's `MerchantOrderDto` requires none): status, fraud status, the captured total (``KlarnaAPI/Order/capturedTotal``)
    /// and what remains authorized. The order amount is only reported: absent, it is the one known before, else
    /// what was captured plus what remains.
    static func observation(_ read: KlarnaAPI.Order, of order: TrackedOrder) -> Result<OrderObservation, MissingFields> {
        guard let status = read.status, let fraudStatus = read.fraudStatus, let captured = read.capturedTotal,
            let remaining = read.remainingAuthorizedAmount
        else {
            return .failure(
                MissingFields(
                    [
                        read.status == nil ? "status" : nil, read.fraudStatus == nil ? "fraud_status" : nil,
                        read.capturedTotal == nil ? "captured_amount" : nil,
                        read.remainingAuthorizedAmount == nil ? "remaining_authorized_amount" : nil,
                    ].compactMap { $0 }))
        }
        let (sum, overflow) = captured.addingReportingOverflow(remaining)
        return .success(
            OrderObservation(
                status: status, fraudStatus: fraudStatus,
                orderAmount: read.orderAmount ?? order.orderAmount ?? (overflow ? .max : sum), capturedAmount: captured,
                remainingAuthorizedAmount: remaining, currency: read.purchaseCurrency, expiresAt: read.expiresAt,
                klarnaReference: read.klarnaReference, captures: OrderMovements(read, orderID: order.orderID).captures))
    }

    /// A read of the order failed at `now`: count it and read again after a backoff.
    func orderReadFailed(_ order: TrackedOrder, _ error: KlarnaAPIError, now: Date, change: Change) async throws -> StepResult {
        var change = change
        let step = order.readFailed(Self.short(error), now: now, retryAfter: readDelay(failures: order.consecutiveFailures + 1, error))
        record(step, into: &change, detail: Self.detail(error))
        try await commit(change, now: now)
        return StepResult(next: step.order.nextDueAt)
    }
}

extension OrderStep {
    /// This step's outcome-closing result, keeping the events and outcomes of `earlier` (the read that led to it).
    fileprivate func merging(before earlier: OrderStep) -> OrderStep {
        var merged = self
        merged.events = earlier.events + events
        merged.outcomes = earlier.outcomes + outcomes
        return merged
    }
}
