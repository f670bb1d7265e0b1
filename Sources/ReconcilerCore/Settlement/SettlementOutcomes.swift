import Foundation

// What the settlement service records and tells the shop: each finding of a payout, each capture that did not
// settle in time, as an outcome. Findings, not ends of a payment: the payment's own outcome stands.

extension SettlementFindingKind {
    /// The outcome a finding of this kind is recorded as.
    public var outcomeKind: OutcomeKind {
        switch self {
        case .orphan: .settlementOrphan
        case .amountMismatch, .ambiguousMatch, .duplicateSettlement: .settlementMismatch
        case .unknownCapture, .unknownRefund: .settlementDrift
        case .reversal: .settlementReversal
        case .totalsMismatch: .payoutMismatch
        }
    }
}

extension Outcome {
    /// A finding as an outcome: Klarna's figure is `amount`, the ledger's (or what the lines or the formula give)
    /// `expectedAmount`. `payoutCurrency` stands in where the finding names no currency (the payout's totals).
    public init(finding: SettlementFinding, payoutCurrency: String) {
        self.init(
            kind: finding.kind.outcomeKind, reason: finding.reason, orderID: finding.orderID,
            merchantReference: finding.merchantReference, amount: finding.actual,
            currency: finding.actualCurrency ?? finding.expectedCurrency ?? payoutCurrency, captureID: finding.captureID,
            paymentReference: finding.paymentReference, finding: finding.kind, refundID: finding.refundID,
            expectedAmount: finding.expected)
    }

    /// A capture no payout settled within `settlements.settle_within_days`.
    public init(overdue: OverdueCapture) {
        self.init(
            kind: .captureUnsettled, reason: overdue.reason, orderID: overdue.key.orderID, amount: overdue.capture.amount,
            currency: overdue.capture.currency, captureID: SettledLine.given(overdue.capture.captureID))
    }
}

extension PayoutReconciliation {
    /// Its findings as outcomes, one each, in the findings' order: what is recorded with the payout.
    public var outcomes: [Outcome] {
        findings.map { Outcome(finding: $0, payoutCurrency: payout.currency) }
    }
}
