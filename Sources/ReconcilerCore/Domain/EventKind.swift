/// What happened to a payment, as its timeline and the journal (`EVENT=`) name it. Every kind is named here; the
/// switches over it are exhaustive, so a new kind must say how loud it is and whether an operator's MESSAGE_ID marks it.
public enum EventKind: String, Codable, Sendable, CaseIterable {
    /// The payment was first tracked (command line, socket, spool).
    case tracked
    /// A delivery about the payment arrived (a hint: the daemon reads Klarna).
    case webhook
    /// A read of Klarna showed a new HPP or payment request status.
    case status
    /// A read older than one already applied was ignored.
    case staleStatus = "stale_status"
    /// Klarna does not know the session.
    case notFound = "not_found"
    /// A read of Klarna failed; it is tried again.
    case readFailed = "read_failed"
    /// The consumer authorized: the token is there.
    case authorized
    /// HPP placed the order although the session was tracked as NONE.
    case modeMismatch = "mode_mismatch"
    /// A side effect is sent (committed as sent before the call).
    case attempt
    /// An unclear create-order waits out its settle period before anything is read or sent.
    case settling
    /// A side effect failed and is tried again.
    case retry
    /// A side effect's answer was lost and cannot be resolved by a read.
    case ambiguous
    /// A read of Klarna told whether a side effect with a lost answer took effect.
    case resolved
    /// Klarna refused a side effect for a reason the order shows; the order is read.
    case refused
    /// A side effect was given up.
    case failed
    /// A capture request was carried out.
    case done
    /// The order exists (placed by the daemon or by HPP).
    case orderPlaced = "order_placed"
    /// An order placed before the answer was lost was found and followed.
    case orderLinked = "order_linked"
    /// A read of the order showed a new status or fraud status.
    case orderStatus = "order_status"
    /// The customer token was created.
    case customerTokenCreated = "customer_token_created"
    /// Someone asked for a capture (on_request).
    case captureRequested = "capture_requested"
    /// A capture request cannot be carried out.
    case captureRefused = "capture_refused"
    /// Klarna confirmed a capture.
    case captured
    /// Someone asked for a refund.
    case refundRequested = "refund_requested"
    /// Klarna made a refund.
    case refunded
    /// A refund did not happen.
    case refundFailed = "refund_failed"
    /// The shop asked to charge a customer token.
    case chargeRequested = "charge_requested"
    /// Klarna placed a charge's order.
    case chargePlaced = "charge_placed"
    /// Klarna declined a charge.
    case chargeDeclined = "charge_declined"
    /// A charge did not happen.
    case chargeFailed = "charge_failed"
    /// Klarna cancelled a customer token.
    case customerTokenCancelled = "customer_token_cancelled"
    /// Klarna opened a dispute of a payment.
    case disputeOpened = "dispute_opened"
    /// A dispute moved to another state, or Klarna moved its deadline.
    case disputeChanged = "dispute_changed"
    /// A dispute's response deadline is near (at a configured lead time).
    case disputeDeadline = "dispute_deadline"
    /// A dispute closed won or lost.
    case disputeWon = "dispute_won"
    case disputeLost = "dispute_lost"
    /// The order's authorization ends soon.
    case authorizationExpiring = "authorization_expiring"
    /// Klarna extended the order's authorization.
    case authorizationExtended = "authorization_extended"
    /// The authorization token expired before an order was placed.
    case tokenExpired = "token_expired"
    /// The payment ended cancelled.
    case cancelled
    /// Klarna rejected the payment.
    case rejected
    /// The payment ended expired.
    case expired
    /// The payment needs a person.
    case needsAttention = "needs_attention"
    /// A Klarna Network payment request completed.
    case paymentRequestCompleted = "payment_request_completed"
    case settlementOrphan = "settlement_orphan"
    case settlementMismatch = "settlement_mismatch"
    case settlementDrift = "settlement_drift"
    case settlementReversal = "settlement_reversal"
    case payoutMismatch = "payout_mismatch"
    case captureUnsettled = "capture_unsettled"
    /// An operator's action was applied (hold, release, retry, cancel, release-remaining).
    case operatorAction = "operator"
    /// An operator's request reached the store, for the daemon to apply.
    case operatorRequest = "operator_request"
    /// An operator's action was refused, with the reason.
    case operatorRefused = "operator_refused"

    /// The event that records an outcome on the timeline.
    public init(_ outcome: OutcomeKind) {
        self =
            switch outcome {
            case .orderPlaced: .orderPlaced
            case .captured: .captured
            case .customerTokenCreated: .customerTokenCreated
            case .cancelled: .cancelled
            case .rejected: .rejected
            case .expired: .expired
            case .needsAttention: .needsAttention
            case .paymentRequestCompleted: .paymentRequestCompleted
            case .refunded: .refunded
            case .refundFailed: .refundFailed
            case .chargePlaced: .chargePlaced
            case .chargeDeclined: .chargeDeclined
            case .chargeFailed: .chargeFailed
            case .customerTokenCancelled: .customerTokenCancelled
            case .settlementOrphan: .settlementOrphan
            case .settlementMismatch: .settlementMismatch
            case .settlementDrift: .settlementDrift
            case .settlementReversal: .settlementReversal
            case .payoutMismatch: .payoutMismatch
            case .captureUnsettled: .captureUnsettled
            case .disputeOpened: .disputeOpened
            case .disputeChanged: .disputeChanged
            case .disputeDeadline: .disputeDeadline
            case .disputeWon: .disputeWon
            case .disputeLost: .disputeLost
            case .disputeActionFailed: .operatorRefused
            }
    }

    /// How loud its journal line is.
    public enum Severity: Sendable, Equatable {
        case error, warning, notice, info
    }

    public var severity: Severity {
        switch self {
        case .tracked, .status, .attempt, .resolved, .orderStatus, .captureRequested, .refundRequested, .chargeRequested, .disputeChanged: .info
        case .disputeOpened, .disputeDeadline, .staleStatus, .notFound, .readFailed, .modeMismatch, .retry, .ambiguous, .refused, .captureRefused,
            .authorizationExpiring,
            .tokenExpired, .expired, .chargeDeclined:
            .warning
        case .failed, .needsAttention, .refundFailed, .chargeFailed, .disputeLost: .error
        case .webhook, .settling, .operatorRequest, .authorized, .done, .orderPlaced, .orderLinked, .customerTokenCreated, .captured,
            .authorizationExtended, .cancelled, .rejected, .paymentRequestCompleted, .refunded, .chargePlaced, .customerTokenCancelled, .disputeWon,
            .settlementOrphan,
            .settlementMismatch,
            .settlementDrift,
            .settlementReversal, .payoutMismatch, .captureUnsettled, .operatorAction, .operatorRefused:
            .notice
        }
    }
}
