import Foundation

/// What the settlement matcher flags. The raw values are stable words (outcomes, logs, metric labels).
public enum SettlementFindingKind: String, Codable, Sendable, CaseIterable {
    /// Lines for an order the ledger does not know: paid at Klarna, unknown to the shop. One finding per order
    /// per payout, naming all its lines.
    case orphan
    /// A SALE whose amount differs from its capture's, a RETURN from its refund's, or either in another currency.
    case amountMismatch = "amount_mismatch"
    /// Drift: the order is known but the SALE's capture is not in the ledger (a capture done by hand in the Merchant
    /// Portal, or an id-less SALE with no unsettled capture of its amount). Recorded, never fixed.
    case unknownCapture = "unknown_capture"
    /// Drift: the order is known but the RETURN's refund is not in the ledger. Recorded, never fixed.
    case unknownRefund = "unknown_refund"
    /// An id-less SALE or RETURN that several captures or refunds of its amount could be: left for an operator.
    case ambiguousMatch = "ambiguous_match"
    /// A capture or refund settled twice: by two lines of this payout, or by this payout after another one.
    case duplicateSettlement = "duplicate_settlement"
    /// A REVERSAL: Klarna refunded the customer on a dispute the merchant lost (merchant loss).
    case reversal
    /// The payout's totals do not add up by Klarna's formula, or the lines summed by type differ from a total.
    case totalsMismatch = "totals_mismatch"
}

/// A figure of a payout: Klarna's name for it in `totals`.
public enum PayoutFigure: String, Codable, Sendable, CaseIterable {
    case sale = "sale_amount"
    case returns = "return_amount"
    case reversal = "reversal_amount"
    case fee = "fee_amount"
    case tax = "tax_amount"
    case feeCorrection = "fee_correction_amount"
    case commission = "commission_amount"
    case charge = "charge_amount"
    case credit = "credit_amount"
    case repay = "repay_amount"
    case holdback = "holdback_amount"
    case release = "release_amount"
    case feeRefund = "fee_refund_amount"
    case settlement = "settlement_amount"

    /// The figures the lines give (summed by type); `fee_correction`, `repay` exist only as totals and
    /// `settlement_amount` is checked by the formula.
    public static let fromLines: [PayoutFigure] = [
        .sale, .returns, .reversal, .fee, .tax, .commission, .charge, .credit, .holdback, .release, .feeRefund,
    ]

    /// What the lines sum for this figure, in words.
    public var linesDescription: String {
        switch self {
        case .sale: return "the SALE lines"
        case .returns: return "the RETURN lines"
        case .reversal: return "the REVERSAL lines less the REVERSAL_MERCHANT_PROTECTION lines"
        case .fee: return "the FEE lines"
        case .tax: return "the lines' vat_amount (and TAX lines)"
        case .feeCorrection: return "fee_correction_amount"
        case .commission: return "the COMMISSION lines"
        case .charge: return "the CHARGE lines"
        case .credit: return "the CREDIT lines"
        case .repay: return "repay_amount"
        case .holdback: return "the HOLDBACK lines"
        case .release: return "the RELEASE lines"
        case .feeRefund: return "the FEE_REFUND lines"
        case .settlement: return "Klarna's formula over the totals"
        }
    }
}

/// One thing the matcher flags, with the ids it concerns and, where amounts are compared, what was expected (the
/// ledger, or the sum the lines or the formula give) and what Klarna says.
public struct SettlementFinding: Codable, Sendable, Equatable {
    public var kind: SettlementFindingKind
    public var paymentReference: String
    /// The lines it concerns (ordinals), empty for a payout-level finding.
    public var lineOrdinals: [Int]
    public var orderID: String?
    public var captureID: String?
    public var refundID: String?
    public var reversalReference: String?
    public var merchantReference: String?
    /// For ``SettlementFindingKind/totalsMismatch``: the figure that differs.
    public var figure: PayoutFigure?
    /// Minor units: the ledger's amount, or what the lines or the formula give.
    public var expected: Int?
    /// Minor units: what Klarna says (a line's magnitude, or a total).
    public var actual: Int?
    public var expectedCurrency: String?
    public var actualCurrency: String?
    /// One line for an operator: what and why.
    public var reason: String

    public init(
        kind: SettlementFindingKind, paymentReference: String, lineOrdinals: [Int] = [], orderID: String? = nil,
        captureID: String? = nil, refundID: String? = nil, reversalReference: String? = nil,
        merchantReference: String? = nil, figure: PayoutFigure? = nil, expected: Int? = nil, actual: Int? = nil,
        expectedCurrency: String? = nil, actualCurrency: String? = nil, reason: String
    ) {
        self.kind = kind
        self.paymentReference = paymentReference
        self.lineOrdinals = lineOrdinals
        self.orderID = orderID
        self.captureID = captureID
        self.refundID = refundID
        self.reversalReference = reversalReference
        self.merchantReference = merchantReference
        self.figure = figure
        self.expected = expected
        self.actual = actual
        self.expectedCurrency = expectedCurrency
        self.actualCurrency = actualCurrency
        self.reason = reason
    }

    /// `actual − expected` when both are known.
    public var delta: Int? {
        guard let expected, let actual else { return nil }
        return Minor.subtract(actual, expected)
    }
}
