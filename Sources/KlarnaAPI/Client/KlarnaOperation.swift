/// One kind of Klarna call, with what repeating it would mean.
public struct KlarnaOperation: Sendable, Hashable, CustomStringConvertible {
    public enum Safety: Sendable, Hashable {
        /// A read: repeating it changes nothing.
        case read
        /// A write Klarna deduplicates (OM calls with `Klarna-Idempotency-Key`) or that is idempotent by nature.
        case idempotent
        /// A write with no documented idempotency (KP create-order, customer token): after an unclear failure,
        /// read Klarna before trying again.
        case unsafe
    }

    public let name: String
    public let safety: Safety

    public var description: String { name }

    public static let readHPPSession = Self(name: "hpp.read_session", safety: .read)
    public static let disableHPPSession = Self(name: "hpp.disable_session", safety: .idempotent)
    public static let readPaymentSession = Self(name: "kp.read_session", safety: .read)
    public static let createOrder = Self(name: "kp.create_order", safety: .unsafe)
    public static let cancelAuthorization = Self(name: "kp.cancel_authorization", safety: .idempotent)
    public static let createCustomerToken = Self(name: "kp.create_customer_token", safety: .unsafe)
    public static let readCustomerToken = Self(name: "ct.read_token", safety: .read)
    /// Klarna answers the same `Klarna-Idempotency-Key` the same way for 24 hours.
    public static let chargeCustomerToken = Self(name: "ct.create_order", safety: .idempotent)
    public static let cancelCustomerToken = Self(name: "ct.update_status", safety: .idempotent)
    public static let readOrder = Self(name: "om.read_order", safety: .read)
    public static let createCapture = Self(name: "om.create_capture", safety: .idempotent)
    public static let createRefund = Self(name: "om.create_refund", safety: .idempotent)
    public static let extendAuthorizationTime = Self(name: "om.extend_authorization_time", safety: .idempotent)
    public static let cancelOrder = Self(name: "om.cancel_order", safety: .idempotent)
    public static let releaseRemainingAuthorization = Self(name: "om.release_remaining_authorization", safety: .idempotent)
    public static let readPaymentRequest = Self(name: "kn.read_payment_request", safety: .read)
    public static let listPayouts = Self(name: "settlements.list_payouts", safety: .read)
    public static let readPayout = Self(name: "settlements.read_payout", safety: .read)
    public static let payoutSummary = Self(name: "settlements.payout_summary", safety: .read)
    public static let listTransactions = Self(name: "settlements.list_transactions", safety: .read)
    public static let listDisputes = Self(name: "disputes.list", safety: .read)
    public static let readDispute = Self(name: "disputes.read", safety: .read)
    public static let acceptDisputeLoss = Self(name: "disputes.accept_loss", safety: .unsafe)
    public static let addDisputeAttachment = Self(name: "disputes.add_attachment", safety: .unsafe)
    public static let representDispute = Self(name: "disputes.represent", safety: .unsafe)
    public static let appealDispute = Self(name: "disputes.appeal", safety: .unsafe)
}
