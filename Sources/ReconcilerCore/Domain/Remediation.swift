import Foundation

/// What an operator can ask of a payment, in the spirit of `postsuper`: stop every Klarna call for it, let it go
/// again, re-drive it after it ended badly, cancel its order, or release what a partial capture left authorized.
public enum OperatorAction: String, Codable, Sendable, CaseIterable {
    case hold, release, retry, cancel
    case releaseRemaining = "release_remaining"

    /// The word for a sentence: "hold", "release-remaining".
    public var word: String { self == .releaseRemaining ? "release-remaining" : rawValue }
}

/// A session or order of a payment, as the remediation rules name it (the store's work key).
public enum RemediationTarget: Hashable, Sendable, Codable {
    case session(String)
    case order(String)
}

/// Why an operator's request does not apply, with the HTTP status the socket answers it with.
public struct RemediationRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// 404: nothing matches; 409: the payment is not in a state the action applies to.
    public var status: Int
    public var reason: String

    public init(status: Int = 409, _ reason: String) {
        self.status = status
        self.reason = reason
    }

    /// Nothing the daemon tracks has that name.
    public static func notTracked(_ reason: String) -> RemediationRefusal { RemediationRefusal(status: 404, reason) }

    public var description: String { reason }
}

/// A payment as the operator named it: its sessions and orders, their intents, and which of them are held.
public struct PaymentView: Sendable {
    public var sessions: [TrackedSession]
    public var orders: [TrackedOrder]
    public var intents: [Intent]
    public var held: Set<RemediationTarget>

    public init(sessions: [TrackedSession], orders: [TrackedOrder], intents: [Intent], held: Set<RemediationTarget>) {
        self.sessions = sessions
        self.orders = orders
        self.intents = intents
        self.held = held
    }

    /// Open sessions and orders, and orders with a refund under way (a captured order is closed, its refunds are not).
    var openTargets: [RemediationTarget] {
        sessions.filter(\.isOpen).map { .session($0.hppSessionID) }
            + orders.filter { order in order.isOpen || intents.contains { $0.subject == order.orderID && RefundRules.isUnderWay($0) } }.map {
                .order($0.orderID)
            }
    }

    /// One phrase for where the payment stands, for refusals.
    var state: String {
        if let order = orders.last {
            return "order \(order.orderID) is \(order.outcome?.rawValue ?? order.phase.rawValue)"
        }
        if let session = sessions.last {
            return "HPP session \(session.hppSessionID) is \(session.outcome?.rawValue ?? session.phase.rawValue)"
        }
        return "nothing is tracked"
    }
}

/// The rules for operator requests: which parts of a payment a request applies to (checked when it is asked, and
/// again when the daemon applies it, since the payment may have moved on), and what applying it changes.
public enum Remediation {
    /// Outcomes a payment can be re-driven from.
    public static let retryable: Set<OutcomeKind> = [.needsAttention, .expired]

    /// The sessions and orders `action` applies to, or why it applies to none. `orderID` is `retry --order-id`.
    public static func targets(
        _ action: OperatorAction, payment: PaymentView, orderID: String? = nil, now: Date
    ) -> Result<[RemediationTarget], RemediationRefusal> {
        if payment.sessions.isEmpty && payment.orders.isEmpty { return .failure(.notTracked("nothing tracked matches")) }
        if orderID != nil && action != .retry { return .failure(RemediationRefusal(status: 400, "--order-id applies to retry only")) }
        // A merchant reference may name several payments: a repair applies to one, named exactly.
        if payment.sessions.count > 1 || payment.orders.count > 1 {
            let ids = payment.sessions.map(\.hppSessionID) + payment.orders.map(\.orderID)
            return .failure(
                RemediationRefusal(
                    "it matches \(max(payment.sessions.count, payment.orders.count)) payments; name one by its HPP session or order id (\(ids.prefix(6).joined(separator: ", ")))"
                ))
        }
        switch action {
        case .hold:
            let open = payment.openTargets
            guard !open.isEmpty else { return .failure(RemediationRefusal("nothing to hold: \(payment.state)")) }
            let free = open.filter { !payment.held.contains($0) }
            guard !free.isEmpty else { return .failure(RemediationRefusal("already held")) }
            return .success(free)
        case .release:
            let held =
                payment.sessions.map { RemediationTarget.session($0.hppSessionID) }.filter(payment.held.contains)
                + payment.orders.map { RemediationTarget.order($0.orderID) }.filter(payment.held.contains)
            guard !held.isEmpty else { return .failure(RemediationRefusal("not held")) }
            return .success(held)
        case .retry, .cancel, .releaseRemaining:
            if !payment.held.isEmpty { return .failure(RemediationRefusal("the payment is held: release it first")) }
        }
        if action == .retry {
            let orders = payment.orders.filter { $0.outcome.map(retryable.contains) == true }
            if !orders.isEmpty {
                if orderID != nil {
                    return .failure(
                        RemediationRefusal(
                            "--order-id is for a session whose create-order answer was lost; order \(orders[0].orderID) exists already"))
                }
                return .success(orders.map { .order($0.orderID) })
            }
            let sessions = payment.sessions.filter { $0.outcome.map(retryable.contains) == true }
            guard !sessions.isEmpty else { return .failure(RemediationRefusal("nothing to retry: \(payment.state)")) }
            for session in sessions {
                if let refusal = session.retryRefusal(orderID: orderID, now: now) { return .failure(refusal) }
            }
            return .success(sessions.map { .session($0.hppSessionID) })
        }
        guard !payment.orders.isEmpty else { return .failure(RemediationRefusal("no order to \(action.word): \(payment.state)")) }
        var refusals: [RemediationRefusal] = []
        var targets: [RemediationTarget] = []
        for order in payment.orders {
            let refusal = action == .cancel ? order.cancelRefusal : order.releaseRemainingRefusal
            if let refusal { refusals.append(refusal) } else { targets.append(.order(order.orderID)) }
        }
        guard !targets.isEmpty else { return .failure(refusals[0]) }
        return .success(targets)
    }
}

extension TrackedSession {
    /// Why `retry` cannot re-drive this session, or `nil`.
    public func retryRefusal(orderID: String?, now: Date) -> RemediationRefusal? {
        guard let outcome, Remediation.retryable.contains(outcome) else {
            return RemediationRefusal("nothing to retry: HPP session \(hppSessionID) is \(self.outcome?.rawValue ?? phase.rawValue)")
        }
        if let orderID {
            guard purpose.placesOrder, self.orderID == nil, authorizationToken != nil else {
                return RemediationRefusal(
                    "--order-id is for a session whose create-order answer was lost; HPP session \(hppSessionID) never reached create-order")
            }
            guard !orderID.isEmpty else { return RemediationRefusal(status: 400, "--order-id is empty") }
            return nil
        }
        if authorizationToken != nil, let tokenExpiresAt, now.hasReached(tokenExpiresAt), needsAuthorizationToken {
            return RemediationRefusal(
                "the authorization token expired at \(Self.format(tokenExpiresAt)): Klarna no longer accepts it, so nothing can place this order now")
        }
        return nil
    }

    /// The session still has something to do with its authorization token (place the order or create the customer
    /// token).
    var needsAuthorizationToken: Bool {
        (purpose.createsCustomerToken && customerTokenID == nil) || (purpose.placesOrder && orderID == nil)
    }

    /// `retry`: re-drives the session from what Klarna says now. With a token still valid it goes back to its
    /// intent, whose unclear or failed attempt is first resolved by reading Klarna (never repeated blindly); without
    /// one it reads the HPP session again. With `orderID` (an order Klarna placed whose id was lost) it records that
    /// order and follows it; the order's first read checks that Klarna knows it.
    public func retried(intents: [Intent], orderID: String?, by requester: String, now: Date) -> (step: SessionStep, intent: Intent?) {
        var session = self
        session.outcome = nil
        session.consecutiveFailures = 0
        session.lastError = nil
        let placeOrder = intents.last { $0.kind == .placeOrder }
        if let orderID {
            session.orderID = orderID
            session.phase = .ordered
            session.nextDueAt = nil
            let event = DomainEvent(
                .operatorAction,
                "retry by \(requester): order \(orderID) recorded as the one Klarna placed for KP session \(kpSessionID); following it")
            return (
                SessionStep(session: session, events: [event], handOff: OrderHandOff(orderID: orderID, placedBy: PlaceOrderMode.none)),
                placeOrder?.confirmed(result: orderID, now: now)
            )
        }
        session.nextDueAt = now
        if authorizationToken != nil, needsAuthorizationToken {
            session.phase = .authorized
            let kind: Intent.Kind = purpose.createsCustomerToken && customerTokenID == nil ? .customerToken : .placeOrder
            let unclear = intents.last { $0.kind == kind && !($0.state == .confirmed) }
            let event = DomainEvent(
                .operatorAction,
                "retry by \(requester): back to \(kind == .placeOrder ? "placing the order" : "creating the customer token"), reading Klarna first")
            return (SessionStep(session: session, events: [event]), unclear.map { $0.ambiguous("re-driven by \(requester)", now: now) })
        }
        session.phase = .polling
        session.pollAnchor = now
        return (SessionStep(session: session, events: [DomainEvent(.operatorAction, "retry by \(requester): reading the HPP session again")]), nil)
    }
}

extension TrackedOrder {
    /// An order an operator named must be this payment's before anything is done with it: when Klarna's
    /// `merchant_reference1` and the payment's reference are both known, they must match. The reason it is not, or
    /// `nil`.
    public func namedOrderMismatch(merchantReferenceAtKlarna: String?) -> String? {
        guard namedByOperator == true, let merchantReference, let merchantReferenceAtKlarna, merchantReference != merchantReferenceAtKlarna else {
            return nil
        }
        return
            "order \(orderID), named with retry --order-id, belongs to merchant reference \(merchantReferenceAtKlarna), not \(merchantReference): not this payment's order; nothing was done with it"
    }

    /// Why `cancel` does not apply, or `nil`: only an order with nothing captured, not already final at Klarna, and
    /// with no side effect under way.
    public var cancelRefusal: RemediationRefusal? {
        if capturedAmount > 0 {
            return RemediationRefusal(
                "order \(orderID) has captures (\(capturedAmount) of \(orderAmount.map(String.init) ?? "?")): cancel is not possible; use release-remaining"
            )
        }
        if let outcome, ![.orderPlaced, .needsAttention].contains(outcome) {
            return RemediationRefusal("order \(orderID) is \(outcome.rawValue): nothing to cancel")
        }
        if let activeIntent {
            return RemediationRefusal("a side effect is under way on order \(orderID) (intent \(activeIntent)); wait for it to end")
        }
        return nil
    }

    /// Why `release-remaining` does not apply, or `nil`: only after a partial capture, with something left.
    public var releaseRemainingRefusal: RemediationRefusal? {
        if capturedAmount == 0 { return RemediationRefusal("order \(orderID) has no captures: use cancel") }
        if (remainingAuthorizedAmount ?? 0) <= 0 || [.captured, .cancelled, .rejected, .expired].contains(outcome) {
            return RemediationRefusal("order \(orderID) is \(outcome?.rawValue ?? status?.rawValue ?? phase.rawValue) with nothing left authorized")
        }
        if let activeIntent {
            return RemediationRefusal("a side effect is under way on order \(orderID) (intent \(activeIntent)); wait for it to end")
        }
        return nil
    }

    /// Why `retry` cannot re-drive this order, or `nil`.
    public var retryRefusal: RemediationRefusal? {
        guard let outcome, Remediation.retryable.contains(outcome) else {
            return RemediationRefusal("nothing to retry: order \(orderID) is \(outcome?.rawValue ?? phase.rawValue)")
        }
        return nil
    }

    /// `retry`: reads the order again and goes on from what it shows. A capture that failed is taken up again with
    /// its own idempotency key, after a read shows whether it happened.
    public func retried(intents: [Intent], by requester: String, now: Date) -> (step: OrderStep, intent: Intent?) {
        var order = self
        order.outcome = nil
        order.phase = .checking
        order.nextDueAt = now
        order.consecutiveFailures = 0
        order.lastError = nil
        var intent: Intent?
        if let capture = intents.last(where: { $0.kind == .capture }), capture.state == .failed {
            intent = capture.ambiguous("re-driven by \(requester)", now: now)
            order.activeIntent = capture.key
        }
        let event = DomainEvent(
            .operatorAction,
            "retry by \(requester): reading the order again" + (intent == nil ? "" : ", then the failed capture with its own idempotency key"))
        return (OrderStep(order: order, events: [event]), intent)
    }

    /// `cancel` or `release-remaining`: the intent (idempotency key `key`) starts; the order follows it until it ends.
    public func operatorIntent(_ action: OperatorAction, key: String, by requester: String, now: Date) -> OrderStep {
        var order = intentStarted(key: key, now: now)
        if order.phase == .closed {
            order.phase = .checking
            order.outcome = nil
        }
        let what = action == .cancel ? "cancelling the order" : "releasing the remaining authorization"
        return OrderStep(order: order, events: [DomainEvent(.operatorAction, "\(action.word) by \(requester): \(what)")])
    }

    /// Klarna cancelled the order at the operator's request.
    public func cancelledOnRequest() -> OrderStep {
        var order = self
        order.activeIntent = nil
        order.status = .cancelled
        order.remainingAuthorizedAmount = 0
        return order.closed(.cancelled, "the order was cancelled at Klarna at an operator's request")
    }

    /// Klarna released what was left authorized: the order is final with what was captured.
    public func remainingReleased() -> OrderStep {
        var order = self
        order.activeIntent = nil
        let released = order.remainingAuthorizedAmount ?? 0
        order.remainingAuthorizedAmount = 0
        order.phase = .closed
        order.outcome = .captured
        order.nextDueAt = nil
        let reason = "the remaining authorization (\(released)) was released at an operator's request; \(capturedAmount) captured in all"
        return OrderStep(order: order, events: [DomainEvent(.captured, reason)], outcomes: [order.outcome(.captured, reason, amount: capturedAmount)])
    }
}
