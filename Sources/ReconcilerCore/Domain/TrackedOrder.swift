import Foundation

/// A placed Klarna order the daemon follows: fraud review, capture per policy, authorization expiry.
public struct TrackedOrder: Codable, Sendable, Equatable {
    public enum Phase: String, Codable, Sendable, CaseIterable {
        /// Read the order to learn its fraud and capture state.
        case checking
        /// Klarna's fraud review is `PENDING`: never captured in this phase.
        case pendingFraud = "pending_fraud"
        /// `on_request`: accepted, waiting for a capture request.
        case awaitingCapture = "awaiting_capture"
        /// A capture intent is under way.
        case capturing
        /// Finished with an outcome.
        case closed
    }

    public var orderID: String
    public var hppSessionID: String?
    public var kpSessionID: String?
    public var merchantReference: String?
    public var capturePolicy: CapturePolicy
    public var placedBy: PlaceOrderMode
    public var phase: Phase
    public var status: OrderStatus?
    public var fraudStatus: FraudStatus?
    public var orderAmount: Int?
    public var capturedAmount: Int
    public var remainingAuthorizedAmount: Int?
    public var currency: String?
    /// The authorization's expiry: "the order can only be captured until this time".
    public var expiresAt: Date?
    public var klarnaReference: String?
    /// The `expires_at` the last expiry warning was about (so each expiry warns once).
    public var warnedForExpiry: Date?
    /// The `expires_at` an extension was last asked for.
    public var extensionForExpiry: Date?
    public var placedOutcomeRecorded: Bool
    /// Named by an operator (`retry --order-id`) rather than found: its first read checks that it is this payment's.
    public var namedByOperator: Bool?
    /// Placed by a charge of a customer token (a renewal); absent for every other order.
    private var renewal: Bool?
    /// The capture or extension intent under way (its idempotency key).
    public var activeIntent: String?
    public var outcome: OutcomeKind?
    public var createdAt: Date
    public var nextDueAt: Date?
    public var reads: Int
    public var consecutiveFailures: Int
    public var lastError: String?

    /// A charge of a customer token placed it: its work waits behind live payments' (``Urgency/renewal``).
    public var isRenewal: Bool {
        get { renewal ?? false }
        set { renewal = newValue ? true : nil }
    }

    /// The Klarna account whose credentials and rate budget every call for this unit uses.
    public var account: AccountID {
        get { storedAccount ?? .default }
        set { storedAccount = newValue == .default ? nil : newValue }
    }
    /// Absent for the default account, so that units written before accounts existed (and by the previous release)
    /// read as the default account's, and the default account's rows stay as they were.
    private var storedAccount: AccountID?

    public init(
        orderID: String, hppSessionID: String?, kpSessionID: String?, merchantReference: String?,
        capturePolicy: CapturePolicy, placedBy: PlaceOrderMode, createdAt: Date
    ) {
        self.orderID = orderID
        self.hppSessionID = hppSessionID
        self.kpSessionID = kpSessionID
        self.merchantReference = merchantReference
        self.capturePolicy = capturePolicy
        self.placedBy = placedBy
        self.phase = .checking
        self.capturedAmount = 0
        self.placedOutcomeRecorded = false
        self.createdAt = createdAt
        self.nextDueAt = createdAt
        self.reads = 0
        self.consecutiveFailures = 0
    }

    public var isOpen: Bool { phase != .closed }

    /// The deadline an open order runs against: its authorization's expiry.
    public var deadline: Date? { isOpen ? expiresAt : nil }

    /// Why a capture request for this order is refused before it is recorded, or `nil` when it is taken (whether
    /// its amount fits is decided when Klarna's answer is read).
    public var captureRequestRefusal: String? {
        guard isOpen else { return "order \(orderID) is \(outcome?.rawValue ?? "closed"): nothing to capture" }
        guard capturePolicy == .onRequest else {
            return "order \(orderID) has capture policy \(capturePolicy.rawValue); capture requests apply to on_request"
        }
        return nil
    }

    public func outcome(_ kind: OutcomeKind, _ reason: String, amount: Int? = nil, captureID: String? = nil) -> Outcome {
        Outcome(
            kind: kind, reason: reason, hppSessionID: hppSessionID, kpSessionID: kpSessionID, orderID: orderID,
            merchantReference: merchantReference, amount: amount ?? orderAmount, currency: currency,
            fraudStatus: fraudStatus?.rawValue, captureID: captureID, klarnaReference: klarnaReference)
    }
}

/// What a read of the order returned.
public struct OrderObservation: Sendable, Equatable {
    public var status: OrderStatus
    public var fraudStatus: FraudStatus
    public var orderAmount: Int
    public var capturedAmount: Int
    public var remainingAuthorizedAmount: Int
    public var currency: String?
    public var expiresAt: Date?
    public var klarnaReference: String?
    /// The order's captures as Klarna lists them.
    public var captures: [OrderMovements.Movement]

    public init(
        status: OrderStatus, fraudStatus: FraudStatus, orderAmount: Int, capturedAmount: Int, remainingAuthorizedAmount: Int,
        currency: String? = nil, expiresAt: Date? = nil, klarnaReference: String? = nil,
        captures: [OrderMovements.Movement] = []
    ) {
        self.status = status
        self.fraudStatus = fraudStatus
        self.orderAmount = orderAmount
        self.capturedAmount = capturedAmount
        self.remainingAuthorizedAmount = remainingAuthorizedAmount
        self.currency = currency
        self.expiresAt = expiresAt
        self.klarnaReference = klarnaReference
        self.captures = captures
    }
}

/// Where a capture request stands: waiting for its order, carried out, or refused (with the reason in its note).
public enum CaptureRequestState: String, Codable, Sendable, CaseIterable {
    case pending, done, refused
}

/// A capture someone asked for (`on_request`); `amount` nil means the remaining authorized amount.
public struct CaptureRequestItem: Codable, Sendable, Equatable {
    public var id: Int64
    public var orderID: String
    public var amount: Int?
    public var requestedAt: Date

    public init(id: Int64, orderID: String, amount: Int?, requestedAt: Date) {
        self.id = id
        self.orderID = orderID
        self.amount = amount
        self.requestedAt = requestedAt
    }
}

public enum OrderAction: Sendable, Equatable {
    /// Capture `amount`; `requestID` is the capture request it serves (nil for `immediate`).
    case capture(amount: Int, requestID: Int64?)
    /// The capture request cannot be served; say why and drop it.
    case refuseRequest(requestID: Int64, reason: String)
    case extendAuthorization
}

public struct OrderStep: Sendable, Equatable {
    public var order: TrackedOrder
    public var events: [DomainEvent] = []
    public var outcomes: [Outcome] = []
    public var action: OrderAction?
    /// Captures this step confirmed, for the settlement ledger.
    public var ledgerCaptures: [LedgerCapture] = []

    public init(
        order: TrackedOrder, events: [DomainEvent] = [], outcomes: [Outcome] = [], action: OrderAction? = nil,
        ledgerCaptures: [LedgerCapture] = []
    ) {
        self.order = order
        self.events = events
        self.outcomes = outcomes
        self.action = action
        self.ledgerCaptures = ledgerCaptures
    }
}

extension TrackedOrder {
    /// The daemon placed this order and Klarna's answer said `fraud_status: ACCEPTED`: that answer tells what a first
    /// read would (an authorized order of the KP session's amount, nothing captured), so the capture policy decides at
    /// once without an OM read. Only the authorization's expiry is missing, which matters to `on_request` orders
    /// alone: those are read as before.
    public func placedAndAccepted(amount: Int, currency: String?, now: Date, deadlines: Deadlines) -> OrderStep {
        var step = applying(
            OrderObservation(
                status: .authorized, fraudStatus: .accepted, orderAmount: amount, capturedAmount: 0, remainingAuthorizedAmount: amount,
                currency: currency),
            request: nil, now: now, deadlines: deadlines)
        step.order.reads = reads
        return step
    }

    /// Applies one read of the order at `now`; `request` is the oldest capture request still waiting.
    public func applying(_ observation: OrderObservation, request: CaptureRequestItem?, now: Date, deadlines: Deadlines) -> OrderStep {
        var order = self
        var step = OrderStep(order: order)
        order.reads += 1
        order.consecutiveFailures = 0
        order.lastError = nil
        if observation.status != status || observation.fraudStatus != fraudStatus {
            step.events.append(
                DomainEvent(
                    .orderStatus,
                    "order \(observation.status), fraud_status \(observation.fraudStatus), captured \(observation.capturedAmount) of \(observation.orderAmount)"
                ))
        }
        order.status = observation.status
        order.fraudStatus = observation.fraudStatus
        order.orderAmount = observation.orderAmount
        order.capturedAmount = observation.capturedAmount
        order.remainingAuthorizedAmount = observation.remainingAuthorizedAmount
        order.currency = observation.currency ?? order.currency
        order.expiresAt = observation.expiresAt ?? order.expiresAt
        order.klarnaReference = observation.klarnaReference ?? order.klarnaReference
        guard phase != .closed else {
            order.nextDueAt = nil
            step.order = order
            return step
        }
        if !order.placedOutcomeRecorded {
            order.placedOutcomeRecorded = true
            let by = placedBy == PlaceOrderMode.none ? "placed by the daemon" : "placed by HPP (\(placedBy.rawValue))"
            step.outcomes.append(order.outcome(.orderPlaced, "order \(by), fraud_status \(observation.fraudStatus)"))
        }

        func close(_ kind: OutcomeKind, _ reason: String, amount: Int? = nil) -> OrderStep {
            order.phase = .closed
            order.outcome = kind
            order.nextDueAt = nil
            step.order = order
            step.events.append(DomainEvent(EventKind(kind), reason))
            step.outcomes.append(order.outcome(kind, reason, amount: amount))
            if placedBy == .captureOrder { step.ledgerCaptures = order.capturedByHPP(observation, now: now) }
            return step
        }

        if observation.fraudStatus == .rejected {
            return close(.rejected, "Klarna rejected the order after fraud review")
        }
        switch observation.status {
        case .cancelled:
            return close(.cancelled, "the order was cancelled at Klarna")
        case .expired:
            return close(.expired, "the order's authorization expired at Klarna")
        case .captured:
            return close(
                .captured, placedBy == .captureOrder ? "HPP captured the order (CAPTURE_ORDER)" : "the order is fully captured at Klarna",
                amount: observation.capturedAmount)
        case .closed:
            return observation.capturedAmount > 0
                ? close(.captured, "the order is closed at Klarna after captures", amount: observation.capturedAmount)
                : close(.cancelled, "the order is closed at Klarna without a capture")
        default:
            // AUTHORIZED, PART_CAPTURED, or a status this version does not know (an open enum): the order goes on.
            break
        }
        if observation.fraudStatus != .accepted {
            // PENDING, or a value this version does not know: never capture, keep reading.
            order.phase = .pendingFraud
            order.nextDueAt = order.capped(now.addingTimeInterval(deadlines.pendingFraudInterval.timeInterval), now: now)
            step.order = order
            return step
        }
        if observation.remainingAuthorizedAmount <= 0 {
            return close(.captured, "nothing left to capture", amount: observation.capturedAmount)
        }
        switch capturePolicy {
        case .never:
            order.phase = .closed
            order.outcome = .orderPlaced
            order.nextDueAt = nil
            step.order = order
            step.events.append(DomainEvent(.done, "capture policy never: the merchant captures elsewhere"))
            return step
        case .immediate:
            order.phase = .capturing
            order.nextDueAt = now
            step.order = order
            step.action = .capture(amount: observation.remainingAuthorizedAmount, requestID: nil)
            return step
        case .onRequest:
            if let expiresAt = order.expiresAt, now.hasReached(expiresAt) {
                return close(.expired, "the authorization expired at \(TrackedSession.format(expiresAt)) without a capture request")
            }
            if let request {
                let amount = request.amount ?? observation.remainingAuthorizedAmount
                if amount <= 0 || amount > observation.remainingAuthorizedAmount {
                    step.action = .refuseRequest(
                        requestID: request.id, reason: "capture of \(amount) refused: \(observation.remainingAuthorizedAmount) remains authorized")
                } else {
                    order.phase = .capturing
                    order.nextDueAt = now
                    step.order = order
                    step.action = .capture(amount: amount, requestID: request.id)
                    return step
                }
            }
            order.phase = .awaitingCapture
            var next = now.addingTimeInterval(deadlines.orderRecheckInterval.timeInterval)
            if let expiresAt = order.expiresAt {
                let warnAt = expiresAt.addingTimeInterval(-deadlines.authorizationWarnBefore.timeInterval)
                if now.hasReached(warnAt) {
                    if order.warnedForExpiry != expiresAt {
                        order.warnedForExpiry = expiresAt
                        step.events.append(
                            DomainEvent(
                                .authorizationExpiring,
                                "the authorization expires at \(TrackedSession.format(expiresAt)) and the order is not captured"))
                    }
                    if deadlines.autoExtendAuthorization, order.extensionForExpiry != expiresAt, step.action == nil {
                        order.extensionForExpiry = expiresAt
                        step.action = .extendAuthorization
                    }
                } else {
                    next = min(next, warnAt)
                }
                next = min(next, expiresAt)
            }
            // A refused request may hide another one behind it.
            if case .refuseRequest = step.action { next = now }
            order.nextDueAt = next
            step.order = order
            return step
        }
    }

    /// The captures HPP made on an order placed with `CAPTURE_ORDER`, for the settlement ledger: the shop's own,
    /// asked of HPP, not drift. Other captures the daemon did not make are left for the settlement sync, which reads
    /// the order when a payout settles one and records it as drift.
    func capturedByHPP(_ observation: OrderObservation, now: Date) -> [LedgerCapture] {
        observation.captures.compactMap { capture in
            guard capture.amount > 0 else { return nil }
            return LedgerCapture(
                orderID: orderID, captureID: capture.id, amount: capture.amount, currency: observation.currency ?? currency,
                capturedAt: capture.at ?? now, source: .daemon)
        }
    }

    /// A capture this daemon made is confirmed by Klarna; its intent is over.
    public func captureConfirmed(amount: Int, captureID: String?, now: Date) -> OrderStep {
        var order = self
        order.activeIntent = nil
        order.capturedAmount += amount
        if let remaining = order.remainingAuthorizedAmount { order.remainingAuthorizedAmount = max(0, remaining - amount) }
        var step = OrderStep(order: order)
        let reason = "captured \(amount)" + (captureID.map { " (capture \($0))" } ?? "")
        step.events.append(DomainEvent(.captured, reason))
        step.outcomes.append(order.outcome(.captured, reason, amount: amount, captureID: captureID))
        step.ledgerCaptures.append(
            LedgerCapture(
                orderID: orderID, captureID: captureID, amount: amount, currency: currency, capturedAt: now, source: .daemon))
        if (order.remainingAuthorizedAmount ?? 0) <= 0 {
            order.status = .captured
            order.phase = .closed
            order.outcome = .captured
            order.nextDueAt = nil
        } else {
            // Part captured: read again to wait for the next request.
            order.status = .partCaptured
            order.phase = .checking
            order.nextDueAt = now
        }
        step.order = order
        return step
    }

    /// Klarna extended the authorization; its intent is over. Read the order again to learn the new `expires_at`.
    public func authorizationExtended(now: Date) -> OrderStep {
        intentEnded(now: now, DomainEvent(.authorizationExtended, "Klarna extended the authorization"))
    }

    /// A capture or extension intent (idempotency key `key`) starts now; the order follows it until it ends.
    public func intentStarted(key: String, now: Date) -> TrackedOrder {
        var order = self
        order.activeIntent = key
        order.nextDueAt = now
        return order
    }

    /// The order's intent waits for its next attempt at `until`.
    public func waitingForIntent(until: Date) -> TrackedOrder {
        var order = self
        order.nextDueAt = until
        return order
    }

    /// Klarna refused the intent of `kind` (`error` is its answer): drop the intent and read the order now, so the
    /// order rules decide what the refusal means.
    public func intentRefused(_ kind: Intent.Kind, error: String, now: Date) -> OrderStep {
        intentEnded(now: now, DomainEvent(.refused, "Klarna refused the \(kind.rawValue) (\(error)); reading the order"))
    }

    /// The intent under way failed and the order cannot say why: drop it and close the order for an operator.
    public func intentFailed(_ reason: String) -> OrderStep {
        var order = self
        order.activeIntent = nil
        return order.closed(.needsAttention, reason)
    }

    /// A read failed; try again after `retryAfter`. Reads keep failing past the authorization's expiry: say so.
    public func readFailed(_ error: String, now: Date, retryAfter: Duration) -> OrderStep {
        var order = self
        order.consecutiveFailures += 1
        order.lastError = error
        order.nextDueAt = now.addingTimeInterval(retryAfter.timeInterval)
        return OrderStep(order: order, events: [DomainEvent(.readFailed, "\(error); next read in \(TrackedSession.seconds(retryAfter))")])
    }

    public func closed(_ kind: OutcomeKind, _ reason: String) -> OrderStep {
        var order = self
        order.phase = .closed
        order.outcome = kind
        order.nextDueAt = nil
        return OrderStep(order: order, events: [DomainEvent(EventKind(kind), reason)], outcomes: [order.outcome(kind, reason)])
    }

    /// A webhook or a capture request: read the order now.
    public func hinted(now: Date) -> TrackedOrder {
        var order = self
        guard isOpen else { return order }
        if order.phase == .awaitingCapture || order.phase == .pendingFraud { order.phase = .checking }
        order.nextDueAt = now
        return order
    }

    /// The intent under way is over (`event` says how): drop it and read the order now.
    private func intentEnded(now: Date, _ event: DomainEvent) -> OrderStep {
        var order = self
        order.activeIntent = nil
        order.phase = .checking
        order.nextDueAt = now
        return OrderStep(order: order, events: [event])
    }

    private func capped(_ date: Date, now: Date) -> Date {
        guard let expiresAt, !now.hasReached(expiresAt) else { return date }
        return min(date, expiresAt)
    }
}
