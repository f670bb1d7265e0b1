import Foundation

/// How the sandbox pays out (``KlarnaSandbox/settle(_:)``): which captures and refunds are due, Klarna's fees, and
/// the extras a payout can carry. Every field is optional in JSON (snake_case); the defaults are those of `init()`.
public struct PayoutSpec: Codable, Sendable {
    /// Only captures and refunds at least this old are paid out (Klarna's contractual payment delay).
    public var delaySeconds: Double
    /// Klarna's percentage fee per SALE, in basis points of its amount (250 = 2.5 %), rounded to the minor unit.
    public var feeBasisPoints: Int
    /// VAT on each Klarna fee, in basis points of the fee; also served as the fee's `vat_rate` (2500 = 25 %).
    public var feeVATBasisPoints: Int
    /// A fixed fee per SALE in minor units; 0 for none.
    public var fixedFee: Int
    /// Held back from every payout of the run, whichever merchant's (a HOLDBACK, `ROLLING_RESERVE`); 0 for none.
    public var holdback: Int
    /// Pays back everything held back by earlier payouts (one RELEASE per merchant and currency).
    public var releaseHoldbacks: Bool
    /// Disputes lost: order id → amount Klarna takes back (a REVERSAL with a `reversal_reference`).
    public var reversals: [String: Int]
    /// Agreed corrections: order id → signed amount (a CORRECTION, which Klarna keeps outside the payout formula).
    public var corrections: [String: Int]

    public init(
        delaySeconds: Double = 0, feeBasisPoints: Int = 250, feeVATBasisPoints: Int = 2_500, fixedFee: Int = 0,
        holdback: Int = 0, releaseHoldbacks: Bool = false, reversals: [String: Int] = [:], corrections: [String: Int] = [:]
    ) {
        self.delaySeconds = delaySeconds
        self.feeBasisPoints = feeBasisPoints
        self.feeVATBasisPoints = feeVATBasisPoints
        self.fixedFee = fixedFee
        self.holdback = holdback
        self.releaseHoldbacks = releaseHoldbacks
        self.reversals = reversals
        self.corrections = corrections
    }

    /// `feeVATBasisPoints` is spelled as the sandbox's snake_case decoder turns `fee_vat_basis_points` back into.
    private enum CodingKeys: String, CodingKey {
        case delaySeconds, feeBasisPoints, feeVATBasisPoints = "feeVatBasisPoints", fixedFee, holdback, releaseHoldbacks
        case reversals, corrections
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = PayoutSpec()
        self.init(
            delaySeconds: try container.decodeIfPresent(Double.self, forKey: .delaySeconds) ?? defaults.delaySeconds,
            feeBasisPoints: try container.decodeIfPresent(Int.self, forKey: .feeBasisPoints) ?? defaults.feeBasisPoints,
            feeVATBasisPoints: try container.decodeIfPresent(Int.self, forKey: .feeVATBasisPoints) ?? defaults.feeVATBasisPoints,
            fixedFee: try container.decodeIfPresent(Int.self, forKey: .fixedFee) ?? defaults.fixedFee,
            holdback: try container.decodeIfPresent(Int.self, forKey: .holdback) ?? defaults.holdback,
            releaseHoldbacks: try container.decodeIfPresent(Bool.self, forKey: .releaseHoldbacks) ?? defaults.releaseHoldbacks,
            reversals: try container.decodeIfPresent([String: Int].self, forKey: .reversals) ?? defaults.reversals,
            corrections: try container.decodeIfPresent([String: Int].self, forKey: .corrections) ?? defaults.corrections)
    }
}

/// One payout as Klarna's Settlements API serves it, with its transactions.
public struct CreatedPayout: Codable, Sendable, Equatable {
    /// 8 characters, as on the merchant's bank statement.
    public var paymentReference: String
    /// The merchant paid: Klarna pays each merchant out apart, one payout per currency.
    public var merchantId: String
    public var payoutDate: Date
    public var currencyCode: String
    public var totals: SandboxSettlementTotals
    public var transactions: [SandboxSettlementTransaction]
}

/// A payout's `totals`, minor units. Amounts are magnitudes; `settlementAmount` follows Klarna's formula
/// (Klarna's Settlements API reference) unless ``KlarnaSandbox/breakTotals(by:)`` made it disagree.
public struct SandboxSettlementTotals: Codable, Sendable, Equatable {
    public var saleAmount = 0
    public var returnAmount = 0
    public var reversalAmount = 0
    public var feeAmount = 0
    public var taxAmount = 0
    public var feeCorrectionAmount = 0
    public var feeRefundAmount = 0
    public var taxRefundAmount = 0
    public var commissionAmount = 0
    public var chargeAmount = 0
    public var creditAmount = 0
    public var holdbackAmount = 0
    public var releaseAmount = 0
    public var repayAmount = 0
    public var depositAmount = 0
    public var openingDebtBalanceAmount = 0
    public var closingDebtBalanceAmount = 0
    public var settlementAmount = 0
}

/// One row of a payout. `amount` is a positive magnitude whose sign comes from `type` (Klarna's Settlements API reference), except
/// CORRECTION, which is signed. Klarna's transactions have no id of their own.
public struct SandboxSettlementTransaction: Codable, Sendable, Equatable {
    /// SALE, FEE, RETURN, REVERSAL, CORRECTION, HOLDBACK or RELEASE here; Klarna has more.
    public var type: String
    public var detailedType: String
    public var amount: Int
    public var currencyCode: String
    public var paymentReference: String
    /// When the order was created.
    public var saleDate: Date
    /// When the event was registered: the capture for a SALE and its FEEs, the refund for a RETURN.
    public var captureDate: Date
    /// `nil` on HOLDBACK and RELEASE, which belong to no order.
    public var orderId: String?
    /// The order's `klarna_reference`.
    public var shortOrderId: String?
    /// The capture on SALE and FEE; `""` on RETURN, REVERSAL and CORRECTION, as Klarna sends it.
    public var captureId: String?
    /// The refund on RETURN; a fresh id on REVERSAL.
    public var refundId: String?
    public var merchantReference1: String?
    public var merchantCaptureReference: String?
    public var merchantRefundReference: String?
    public var purchaseCountry: String?
    /// On FEE: the VAT rate in basis points and the VAT on the fee (the payout's `tax_amount` adds these up).
    public var vatRate: Int?
    public var vatAmount: Int?
    /// On REVERSAL: the lost dispute, `krn:klarna:eu1:dispute:fraud:<n>`.
    public var reversalReference: String?
}
