import Foundation

/// A settlement line's identity. Klarna gives transactions no id, so a line is its payout's `payment_reference` and
/// its position among that payout's transactions (Klarna's Settlements API reference).
public struct SettledLineKey: Codable, Sendable, Hashable, CustomStringConvertible {
    public var paymentReference: String
    public var ordinal: Int

    public init(paymentReference: String, ordinal: Int) {
        self.paymentReference = paymentReference
        self.ordinal = ordinal
    }

    public var description: String { "\(paymentReference)#\(ordinal)" }
}

/// One settlement transaction, as the matcher needs it. Amounts are minor units exactly as Klarna sent them (their
/// sign is not documented: ``SettlementKind/signed(_:)`` gives it); empty strings (Klarna sends `capture_id: ""`
/// on RETURN and REVERSAL) count as absent.
public struct SettledLine: Codable, Sendable, Equatable {
    public var paymentReference: String
    /// Position within the payout (the translation counts from 1, as people do); part of the line's identity.
    public var ordinal: Int
    public var kind: SettlementKind
    public var detailedType: String?
    public var amount: Int
    /// VAT on Klarna's fee; the payout's `tax_amount` is the sum of these.
    public var vatAmount: Int?
    public var orderID: String?
    public var captureID: String?
    public var refundID: String?
    public var currency: String
    public var captureDate: Date?
    /// A REVERSAL's dispute (`krn:klarna:eu1:dispute:<category>:<n>`).
    public var reversalReference: String?
    /// `merchant_reference1`: the shop's own reference, shown with an orphan.
    public var merchantReference: String?

    public init(
        paymentReference: String, ordinal: Int, kind: SettlementKind, detailedType: String? = nil, amount: Int,
        vatAmount: Int? = nil, orderID: String? = nil, captureID: String? = nil, refundID: String? = nil,
        currency: String, captureDate: Date? = nil, reversalReference: String? = nil, merchantReference: String? = nil
    ) {
        self.paymentReference = paymentReference
        self.ordinal = ordinal
        self.kind = kind
        self.detailedType = detailedType
        self.amount = amount
        self.vatAmount = vatAmount
        self.orderID = orderID
        self.captureID = captureID
        self.refundID = refundID
        self.currency = currency
        self.captureDate = captureDate
        self.reversalReference = reversalReference
        self.merchantReference = merchantReference
    }

    public var key: SettledLineKey { SettledLineKey(paymentReference: paymentReference, ordinal: ordinal) }

    /// The amount as it moves the payout (magnitude with the type's sign).
    public var signedAmount: Int { kind.signed(amount) }

    /// What the line adds to or takes from the payout: its signed amount less the VAT on it (`vat_amount` is VAT on
    /// Klarna's fee, which Klarna's formula takes off as tax).
    public var payoutEffect: Int { Minor.subtract(signedAmount, Minor.magnitude(vatAmount ?? 0)) }

    /// The ids with empty strings taken as absent.
    public var orderIDGiven: String? { Self.given(orderID) }
    public var captureIDGiven: String? { Self.given(captureID) }
    public var refundIDGiven: String? { Self.given(refundID) }

    static func given(_ value: String?) -> String? {
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? nil : trimmed
    }
}

/// A payout's `totals` (Klarna's Settlements API reference), minor units as Klarna sent them. Klarna requires all but `tax_amount`
/// and `fee_correction_amount`; `commission_reversal_amount` appears only in third-party schemas.
public struct SettledTotals: Codable, Sendable, Equatable {
    public var saleAmount: Int
    public var returnAmount: Int
    public var reversalAmount: Int
    public var feeAmount: Int
    public var taxAmount: Int?
    public var feeCorrectionAmount: Int?
    public var feeRefundAmount: Int
    public var taxRefundAmount: Int
    public var commissionAmount: Int
    public var chargeAmount: Int
    public var creditAmount: Int
    public var holdbackAmount: Int
    public var releaseAmount: Int
    public var repayAmount: Int
    public var depositAmount: Int
    public var openingDebtBalanceAmount: Int
    public var closingDebtBalanceAmount: Int
    public var settlementAmount: Int
    public var commissionReversalAmount: Int?

    public init(
        saleAmount: Int = 0, returnAmount: Int = 0, reversalAmount: Int = 0, feeAmount: Int = 0, taxAmount: Int? = nil,
        feeCorrectionAmount: Int? = nil, feeRefundAmount: Int = 0, taxRefundAmount: Int = 0, commissionAmount: Int = 0,
        chargeAmount: Int = 0, creditAmount: Int = 0, holdbackAmount: Int = 0, releaseAmount: Int = 0,
        repayAmount: Int = 0, depositAmount: Int = 0, openingDebtBalanceAmount: Int = 0,
        closingDebtBalanceAmount: Int = 0, settlementAmount: Int, commissionReversalAmount: Int? = nil
    ) {
        self.saleAmount = saleAmount
        self.returnAmount = returnAmount
        self.reversalAmount = reversalAmount
        self.feeAmount = feeAmount
        self.taxAmount = taxAmount
        self.feeCorrectionAmount = feeCorrectionAmount
        self.feeRefundAmount = feeRefundAmount
        self.taxRefundAmount = taxRefundAmount
        self.commissionAmount = commissionAmount
        self.chargeAmount = chargeAmount
        self.creditAmount = creditAmount
        self.holdbackAmount = holdbackAmount
        self.releaseAmount = releaseAmount
        self.repayAmount = repayAmount
        self.depositAmount = depositAmount
        self.openingDebtBalanceAmount = openingDebtBalanceAmount
        self.closingDebtBalanceAmount = closingDebtBalanceAmount
        self.settlementAmount = settlementAmount
        self.commissionReversalAmount = commissionReversalAmount
    }
}

/// A payout: one bank transfer (or, for `GROSS`/`GROSS_FEE`, one statement) per currency.
public struct SettledPayout: Codable, Sendable, Equatable {
    /// The bank transfer's note; the payout's identity.
    public var paymentReference: String
    /// When Klarna initiated the payout.
    public var payoutDate: Date
    public var currency: String
    /// `merchant_settlement_type`: `NET` (fees deducted), `GROSS` (fees invoiced), `GROSS_FEE` (fee invoice), or a
    /// value Klarna adds later.
    public var settlementType: String
    public var totals: SettledTotals

    public init(paymentReference: String, payoutDate: Date, currency: String, settlementType: String, totals: SettledTotals) {
        self.paymentReference = paymentReference
        self.payoutDate = payoutDate
        self.currency = currency
        self.settlementType = settlementType
        self.totals = totals
    }
}
