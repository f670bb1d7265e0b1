import Foundation

/// How the HPP session was created (`options.place_order_mode`): who places the order.
public enum PlaceOrderMode: String, Codable, Sendable, CaseIterable {
    /// HPP hands back an authorization token; the daemon places the order.
    case none = "NONE"
    /// HPP places the order itself and hands back its `order_id`.
    case placeOrder = "PLACE_ORDER"
    /// HPP places and captures the order.
    case captureOrder = "CAPTURE_ORDER"
}

/// When a placed order is captured.
public enum CapturePolicy: String, Codable, Sendable, CaseIterable {
    /// Capture the full amount as soon as `fraud_status` is `ACCEPTED`.
    case immediate
    /// Wait for a capture request (socket, spool file or `klarna-reconciler capture`).
    case onRequest = "on_request"
    /// Never capture: the merchant does it elsewhere.
    case never
}

/// What the consumer's authorization is for (the KP session's `intent`).
public enum PaymentPurpose: String, Codable, Sendable, CaseIterable {
    case buy
    case tokenize
    case buyAndTokenize = "buy_and_tokenize"

    public var placesOrder: Bool { self != .tokenize }
    public var createsCustomerToken: Bool { self != .buy }
}

/// The outcomes an operator or the merchant's backend acts on. Each is recorded, written to the outbox and logged.
public enum OutcomeKind: String, Codable, Sendable, CaseIterable {
    case orderPlaced = "order_placed"
    case captured
    case customerTokenCreated = "customer_token_created"
    case cancelled
    case rejected
    case expired
    case needsAttention = "needs_attention"
    /// A Klarna Network payment request reached `COMPLETED`: the outcome carries `klarna_network_session_token`.
    case paymentRequestCompleted = "payment_request_completed"
    /// Klarna made a refund the shop asked for (`refund_id`, `refund_reference`).
    case refunded
    /// A refund the shop asked for did not happen: Klarna (or the daemon, from a read of the order) refused it, or
    /// no clear answer came after every attempt.
    case refundFailed = "refund_failed"
    /// Klarna placed the order of a charge of a customer token (a renewal): `order_id`, `charge_reference`. The order
    /// is followed from here like any other (`captured` by its capture policy).
    case chargePlaced = "charge_placed"
    /// Klarna declined a charge (`403`, or a `400` naming a fraud status or reason): final for its reference; the
    /// shop asks again with a new reference if it wants to try again.
    case chargeDeclined = "charge_declined"
    /// A charge that did not happen and was not a decline: the token is not active or unknown, Klarna refused the
    /// request, or no clear answer came within Klarna's 24 hours.
    case chargeFailed = "charge_failed"
    /// Klarna cancelled a customer token an operator asked to cancel: no charge of it is made from now on.
    case customerTokenCancelled = "customer_token_cancelled"

    // Disputes (`disputes.enabled`): what Klarna's Disputes API shows of a payment's disputes, and the operators'
    // actions on them. `dispute_id`, `dispute_state` and `deadline` say which and by when.
    /// Klarna opened a dispute (or the daemon saw it for the first time).
    case disputeOpened = "dispute_opened"
    /// A dispute moved to another state, or Klarna moved its deadline.
    case disputeChanged = "dispute_changed"
    /// A dispute's deadline is `disputes.warn_before_hours` away, once per lead time and deadline.
    case disputeDeadline = "dispute_deadline"
    /// A dispute closed, won: Klarna releases what it held (the fee stays).
    case disputeWon = "dispute_won"
    /// A dispute closed, lost: the disputed amount goes back to the customer.
    case disputeLost = "dispute_lost"
    /// An operator's action on a dispute (accept-loss, evidence) was refused by the dispute's state or by Klarna, or
    /// got no clear answer after every attempt.
    case disputeActionFailed = "dispute_action_failed"

    // Settlements (`settlements.enabled`): what matching Klarna's payouts against the ledger found. Findings, not
    // ends of a payment: the payment's own outcome stands, and nothing is "fixed" by the daemon.
    /// Settled lines for an order the daemon never saw: paid at Klarna, unknown to the shop.
    case settlementOrphan = "settlement_orphan"
    /// A settled amount that differs from the capture's or refund's, a capture or refund settled twice, or an
    /// id-less line several captures could be.
    case settlementMismatch = "settlement_mismatch"
    /// An order changed outside the daemon (a capture or refund by hand in the Merchant Portal), seen on a read of
    /// the order or on a settlement line. Recorded, never fixed.
    case settlementDrift = "settlement_drift"
    /// A REVERSAL: Klarna refunded the customer on a dispute the merchant lost.
    case settlementReversal = "settlement_reversal"
    /// A payout whose transactions do not add up to its totals by Klarna's formula.
    case payoutMismatch = "payout_mismatch"
    /// A capture no payout settled within `settlements.settle_within_days`.
    case captureUnsettled = "capture_unsettled"

    /// About a dispute rather than a payment's end.
    public var isDispute: Bool {
        switch self {
        case .disputeOpened, .disputeChanged, .disputeDeadline, .disputeWon, .disputeLost, .disputeActionFailed: true
        default: false
        }
    }

    /// A settlement finding rather than a payment's end.
    public var isSettlement: Bool {
        switch self {
        case .settlementOrphan, .settlementMismatch, .settlementDrift, .settlementReversal, .payoutMismatch, .captureUnsettled: true
        default: false
        }
    }
}

extension OutcomeKind {
    /// The `outcome` label of ``MetricName/charges`` for a charge's outcome; `nil` for every other outcome.
    public var chargeResult: String? {
        switch self {
        case .chargePlaced: "placed"
        case .chargeDeclined: "declined"
        case .chargeFailed: "failed"
        default: nil
        }
    }
}

/// An outcome as the domain decides it; the engine stores it and writes it to the outbox.
public struct Outcome: Codable, Sendable, Equatable {
    public var kind: OutcomeKind
    /// One sentence for an operator: what happened and why.
    public var reason: String
    public var hppSessionID: String?
    public var kpSessionID: String?
    public var orderID: String?
    public var merchantReference: String?
    public var amount: Int?
    public var currency: String?
    public var fraudStatus: String?
    public var captureID: String?
    public var customerTokenID: String?
    public var klarnaReference: String?
    public var paymentRequestID: String?
    /// For the merchant's acquiring partner; valid 60 minutes. Written to the outbox, never logged.
    public var klarnaNetworkSessionToken: String?
    /// Settlement outcomes: the payout (`payment_reference`) and the finding's stable word.
    public var paymentReference: String?
    public var finding: SettlementFindingKind?
    public var refundID: String?
    /// Refund outcomes: the shop's reference of the refund.
    public var refundReference: String?
    /// Charge outcomes: the shop's reference of the charge.
    public var chargeReference: String?
    /// Outcomes of Klarna's refusals: its error code and the correlation id its support asks for.
    public var klarnaErrorCode: String?
    public var klarnaCorrelationID: String?
    /// Settlement outcomes that compare amounts: the ledger's (or the formula's) figure; `amount` is Klarna's.
    public var expectedAmount: Int?
    /// Dispute outcomes: the dispute, its state, and the deadline of that state (respond or appeal by).
    public var disputeID: String?
    public var disputeState: String?
    public var deadline: Date?

    public init(
        kind: OutcomeKind, reason: String, hppSessionID: String? = nil, kpSessionID: String? = nil, orderID: String? = nil,
        merchantReference: String? = nil, amount: Int? = nil, currency: String? = nil, fraudStatus: String? = nil,
        captureID: String? = nil, customerTokenID: String? = nil, klarnaReference: String? = nil,
        paymentRequestID: String? = nil, klarnaNetworkSessionToken: String? = nil, paymentReference: String? = nil,
        finding: SettlementFindingKind? = nil, refundID: String? = nil, expectedAmount: Int? = nil
    ) {
        self.kind = kind
        self.reason = reason
        self.hppSessionID = hppSessionID
        self.kpSessionID = kpSessionID
        self.orderID = orderID
        self.merchantReference = merchantReference
        self.amount = amount
        self.currency = currency
        self.fraudStatus = fraudStatus
        self.captureID = captureID
        self.customerTokenID = customerTokenID
        self.klarnaReference = klarnaReference
        self.paymentRequestID = paymentRequestID
        self.klarnaNetworkSessionToken = klarnaNetworkSessionToken
        self.paymentReference = paymentReference
        self.finding = finding
        self.refundID = refundID
        self.expectedAmount = expectedAmount
    }
}

/// Something that happened to a session or order, kept for `show` and logged. `kind` is a stable word
/// (`tracked`, `status`, `stale_status`, `attempt`, `retry`, `warning`, …); `message` is for people.
public struct DomainEvent: Codable, Sendable, Equatable {
    public var kind: EventKind
    public var message: String

    public init(_ kind: EventKind, _ message: String) {
        self.kind = kind
        self.message = message
    }
}
