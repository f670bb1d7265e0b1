import ReconcilerCore

/// One recorded settlement line of a payment, in plain values: what `show` prints and puts in its JSON
/// (`settlement_lines`).
struct SettlementLineView: Encodable {
    /// The payout (`payment_reference`, as on the bank statement) and the line's place in it.
    let paymentReference: String
    let ordinal: Int
    /// Klarna's `type` (SALE, FEE, RETURN, …) and `detailed_type`.
    let type: String
    let detailedType: String?
    /// Minor units, signed as the line moves the payout.
    let amount: Int
    /// VAT on Klarna's fee.
    let vatAmount: Int?
    let currency: String
    let orderID: String?
    let captureID: String?
    let refundID: String?
    /// What the line matched: `capture`, `refund`, `order`, `payout_level` or `unmatched`.
    let matched: String
    let unmatchedReason: UnmatchedReason?
    /// Who made the capture or refund it matched: `daemon`, or `observed` (done outside the daemon).
    let source: LedgerSource?
    /// What it matched and how, or why not.
    let note: String

    init(_ reconciled: LineReconciliation) {
        let line = reconciled.line
        paymentReference = line.paymentReference
        ordinal = line.ordinal
        type = line.kind.rawValue
        detailedType = line.detailedType
        amount = reconciled.signedAmount
        vatAmount = line.vatAmount
        currency = line.currency
        orderID = line.orderIDGiven
        captureID = line.captureIDGiven
        refundID = line.refundIDGiven
        switch reconciled.match {
        case .capture: matched = "capture"
        case .refund: matched = "refund"
        case .order: matched = "order"
        case .payoutLevel: matched = "payout_level"
        case .unmatched: matched = "unmatched"
        }
        unmatchedReason = reconciled.match.unmatchedReason
        source = reconciled.source
        note = reconciled.note
    }
}
