import Foundation

/// A side effect on an authorized session: placing its order, creating its customer token.
public enum SessionIntentKind: Sendable, Equatable, CaseIterable {
    case placeOrder, customerToken

    public var intentKind: Intent.Kind {
        switch self {
        case .placeOrder: .placeOrder
        case .customerToken: .customerToken
        }
    }
}

/// A side effect on a placed order: Order Management writes, each deduplicated by Klarna's idempotency key.
public enum OrderIntentKind: Sendable, Equatable, CaseIterable {
    case capture, extendAuthorization, cancelOrder, releaseRemaining

    public var intentKind: Intent.Kind {
        switch self {
        case .capture: .capture
        case .extendAuthorization: .extendAuthorization
        case .cancelOrder: .cancelOrder
        case .releaseRemaining: .releaseRemaining
        }
    }
}

extension Intent.Kind {
    /// What the intent acts on. Every kind is named here, so a new kind cannot silently take another kind's path.
    public enum Target: Sendable, Equatable {
        case session(SessionIntentKind)
        case order(OrderIntentKind)
        /// A refund of an order's captured money: it runs whatever the order's phase (a captured order is closed) and
        /// never changes the order; its rules are ``RefundRules``.
        case refund
        /// An order placed with a customer token: a unit of its own until Klarna placed it (``ChargeRules``).
        case charge
        /// A customer token cancelled: a unit of its own (``TokenCancelRules``).
        case cancelToken
    }

    public var target: Target {
        switch self {
        case .placeOrder: .session(.placeOrder)
        case .customerToken: .session(.customerToken)
        case .capture: .order(.capture)
        case .extendAuthorization: .order(.extendAuthorization)
        case .cancelOrder: .order(.cancelOrder)
        case .releaseRemaining: .order(.releaseRemaining)
        case .refund: .refund
        case .charge: .charge
        case .cancelToken: .cancelToken
        }
    }
}

/// What a read of the order says, for deciding whether an order intent whose answer was lost took effect.
public struct OrderFacts: Sendable, Equatable {
    public var status: OrderStatus?
    public var capturedTotal: Int?
    public var remainingAuthorizedAmount: Int?
    public var expiresAt: Date?

    public init(status: OrderStatus?, capturedTotal: Int?, remainingAuthorizedAmount: Int?, expiresAt: Date?) {
        self.status = status
        self.capturedTotal = capturedTotal
        self.remainingAuthorizedAmount = remainingAuthorizedAmount
        self.expiresAt = expiresAt
    }
}

/// The rules for order intents after an unclear answer and after Klarna's final no.
public enum OrderIntentRules {
    /// Whether Klarna's order shows the intent done: then it is confirmed without another call; otherwise it is sent
    /// again with the same idempotency key.
    /// - Parameters:
    ///   - expectedCapturedTotal: for a capture, what the order's captured total is once this capture is in.
    ///   - knownExpiry: for an extension, the authorization's expiry before it was asked for.
    public static func isDone(_ kind: OrderIntentKind, facts: OrderFacts, expectedCapturedTotal: Int?, knownExpiry: Date?) -> Bool {
        switch kind {
        case .capture:
            return (facts.capturedTotal ?? 0) >= (expectedCapturedTotal ?? .max)
        case .cancelOrder:
            return facts.status == .cancelled
        case .releaseRemaining:
            return (facts.capturedTotal ?? 0) > 0 && facts.remainingAuthorizedAmount == 0
        case .extendAuthorization:
            guard let extended = facts.expiresAt else { return false }
            return knownExpiry.map { extended > $0 } ?? true
        }
    }

    /// What the order does once an order intent is given up (``IntentVerdict`` said so).
    public enum GiveUp: Sendable, Equatable {
        /// An operator asked to stop the money (cancel, release) and it did not happen: the order waits for a person,
        /// never falling back into the capture policy.
        case waitForOperator
        /// Klarna said no for a reason the order shows (cancelled, expired, over-capture, not extendable), or an
        /// extension did not get through: read the order and let the order's rules decide.
        case readOrder
        /// The order needs attention.
        case fail
    }

    public static func giveUp(_ kind: OrderIntentKind, status: Int?) -> GiveUp {
        switch kind {
        case .cancelOrder, .releaseRemaining: .waitForOperator
        case .extendAuthorization: .readOrder
        case .capture: status == 403 ? .readOrder : .fail
        }
    }
}

/// The rules for session intents after Klarna's final no.
public enum SessionIntentRules {
    /// How the session ends when its intent is given up: Klarna's 404 means the authorization token expired or was
    /// released, 403 `REJECTED` a rejected order or token; anything else needs a person.
    /// - Parameters:
    ///   - error: Klarna's error, short, as the reason quotes it.
    ///   - retryReason: why no retry (from ``IntentVerdict``).
    public static func giveUp(
        _ kind: SessionIntentKind, status: Int?, errorCode: String?, error: String, retryReason: String
    ) -> (outcome: OutcomeKind, reason: String) {
        let what =
            switch kind {
            case .placeOrder: "order"
            case .customerToken: "customer token"
            }
        switch (status, errorCode) {
        case (404, _):
            return (.expired, "Klarna refused the authorization token (\(error)): it expired or was released")
        case (403, "REJECTED"):
            return (.rejected, "Klarna rejected the \(what) (\(error))")
        default:
            return (.needsAttention, "\(kind.intentKind.rawValue) failed: \(error); \(retryReason)")
        }
    }
}
