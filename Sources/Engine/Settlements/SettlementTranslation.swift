import Foundation
import KlarnaAPI
import ReconcilerCore

// Klarna's settlement answers as the core's matcher takes them. The core keeps the amounts as Klarna sent them;
// the sign comes from the type there (Klarna's Settlements API reference: the JSON sign per type is not documented).

extension SettledTotals {
    public init(_ totals: PayoutTotals) {
        self.init(
            saleAmount: totals.saleAmount, returnAmount: totals.returnAmount, reversalAmount: totals.reversalAmount,
            feeAmount: totals.feeAmount, taxAmount: totals.taxAmount, feeCorrectionAmount: totals.feeCorrectionAmount,
            feeRefundAmount: totals.feeRefundAmount, taxRefundAmount: totals.taxRefundAmount,
            commissionAmount: totals.commissionAmount, chargeAmount: totals.chargeAmount, creditAmount: totals.creditAmount,
            holdbackAmount: totals.holdbackAmount, releaseAmount: totals.releaseAmount, repayAmount: totals.repayAmount,
            depositAmount: totals.depositAmount, openingDebtBalanceAmount: totals.openingDebtBalanceAmount,
            closingDebtBalanceAmount: totals.closingDebtBalanceAmount, settlementAmount: totals.settlementAmount,
            commissionReversalAmount: totals.commissionReversalAmount)
    }
}

extension SettledPayout {
    public init(_ payout: Payout) {
        self.init(
            paymentReference: payout.paymentReference, payoutDate: payout.payoutDate, currency: payout.currencyCode,
            settlementType: payout.merchantSettlementType.rawValue, totals: SettledTotals(payout.totals))
    }
}

extension SettledLine {
    /// `ordinal`: the transaction's place in its payout's list, counted from 1. Klarna gives a transaction no id, so
    /// the payout's reference and this place are what name it.
    public init(_ transaction: SettlementTransaction, paymentReference: String, ordinal: Int) {
        self.init(
            paymentReference: paymentReference, ordinal: ordinal, kind: SettlementKind(rawValue: transaction.type.rawValue),
            detailedType: transaction.detailedType?.rawValue, amount: transaction.amount, vatAmount: transaction.vatAmount,
            orderID: transaction.orderID, captureID: transaction.captureID, refundID: transaction.refundID,
            currency: transaction.currencyCode, captureDate: transaction.captureDate,
            reversalReference: transaction.reversalReference, merchantReference: transaction.merchantReference1)
    }

    /// A payout's transactions, in the order Klarna listed them.
    public static func lines(of transactions: [SettlementTransaction], paymentReference: String) -> [SettledLine] {
        transactions.enumerated().map { SettledLine($0.element, paymentReference: paymentReference, ordinal: $0.offset + 1) }
    }
}

extension OrderMovements {
    /// What an OM order read shows was captured and refunded on the order. `orderID`: the order asked for, which the
    /// read need not name. A capture or refund without an amount tells nothing and is left out.
    public init(_ order: KlarnaAPI.Order, orderID: String) {
        self.init(
            orderID: orderID, currency: order.purchaseCurrency,
            captures: order.captures.compactMap { capture in
                capture.capturedAmount.map { Movement(id: capture.captureID, amount: $0, at: capture.capturedAt) }
            },
            refunds: order.refunds.compactMap { refund in
                refund.refundedAmount.map { Movement(id: refund.refundID, amount: $0, at: refund.refundedAt) }
            })
    }
}
