import Foundation

/// Why a settlement line matched nothing in the ledger.
public enum UnmatchedReason: String, Codable, Sendable, CaseIterable {
    /// The ledger does not know the line's order (an orphan).
    case orderUnknown = "order_unknown"
    /// A SALE or RETURN without an order id: nothing to match it by (an orphan).
    case noOrderID = "no_order_id"
    /// The order is known, the SALE's capture is not (drift).
    case captureUnknown = "capture_unknown"
    /// The order is known, the RETURN's refund is not (drift).
    case refundUnknown = "refund_unknown"
    /// Without an id, several unsettled captures or refunds of the line's amount could be it.
    case ambiguous
}

/// What one settlement line matched in the ledger.
public enum LineMatch: Codable, Sendable, Equatable {
    /// A SALE settled this capture; `byAmount` when Klarna gave no capture id and the capture was the only unsettled
    /// one of that amount on the order.
    case capture(CaptureKey, byAmount: Bool)
    /// A RETURN settled this refund; `byAmount` as for captures.
    case refund(RefundKey, byAmount: Bool)
    /// A line about a known order that settles no capture or refund of its own: FEE (with its capture when Klarna
    /// names one the ledger knows), COMMISSION, TAX, REVERSAL, REVERSAL_MERCHANT_PROTECTION, FEE_REFUND, CORRECTION,
    /// a RETURN `PAYMENT_DEFAULT`, types not known.
    case order(String, capture: CaptureKey?)
    /// About the payout rather than an order: HOLDBACK, RELEASE, CHARGE, CREDIT, and any other line without an order
    /// id (but SALE and RETURN). Never an orphan.
    case payoutLevel
    case unmatched(UnmatchedReason)

    /// Matched to a capture, a refund or an order.
    public var isMatched: Bool {
        switch self {
        case .capture, .refund, .order: return true
        case .payoutLevel, .unmatched: return false
        }
    }

    public var unmatchedReason: UnmatchedReason? {
        if case .unmatched(let reason) = self { return reason }
        return nil
    }
}

/// One line of a payout and what became of it.
public struct LineReconciliation: Codable, Sendable, Equatable {
    public var line: SettledLine
    /// The amount as it moves the payout (``SettlementKind/signed(_:)``).
    public var signedAmount: Int
    public var match: LineMatch
    /// Who made the capture or refund the line matched: `observed` is a capture or refund done outside the daemon
    /// that a read of the order had already noticed.
    public var source: LedgerSource?
    /// One line for people: what it matched and how, or why not.
    public var note: String
    /// The line of another payout that had settled the matched capture or refund already when this line was matched
    /// (a duplicate settlement): this line does not settle it again.
    public var settledElsewhere: SettledLineKey?

    public init(
        line: SettledLine, signedAmount: Int, match: LineMatch, source: LedgerSource? = nil, note: String,
        settledElsewhere: SettledLineKey? = nil
    ) {
        self.line = line
        self.signedAmount = signedAmount
        self.match = match
        self.source = source
        self.note = note
        self.settledElsewhere = settledElsewhere
    }
}
