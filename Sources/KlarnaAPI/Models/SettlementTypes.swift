import ReconcilerCore

/// Settlements `Transaction.type` (Klarna's Settlements API reference). The spec's enum; Klarna adds kinds without notice.
///
/// The type carries the sign: Klarna's JSON `amount` per type is not documented (§2), so the matcher decides.
public struct SettlementTransactionType: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A captured, shipped order.
    public static let sale = Self(rawValue: "SALE")
    /// A Klarna fee; several per capture are possible.
    public static let fee = Self(rawValue: "FEE")
    /// A refund (the merchant's, or `PAYMENT_DEFAULT` registered by Klarna).
    public static let `return` = Self(rawValue: "RETURN")
    /// Money taken back on a lost dispute.
    public static let reversal = Self(rawValue: "REVERSAL")
    /// A merchant-protection credit, counted against reversals.
    public static let reversalMerchantProtection = Self(rawValue: "REVERSAL_MERCHANT_PROTECTION")
    public static let commission = Self(rawValue: "COMMISSION")
    /// An agreed order correction, either sign; outside the payout formula.
    public static let correction = Self(rawValue: "CORRECTION")
    /// Money held back (reserve, review, bank details); see ``release``.
    public static let holdback = Self(rawValue: "HOLDBACK")
    public static let release = Self(rawValue: "RELEASE")
    public static let charge = Self(rawValue: "CHARGE")
    public static let credit = Self(rawValue: "CREDIT")
    /// A wrongly charged fee paid back.
    public static let feeRefund = Self(rawValue: "FEE_REFUND")
    /// In the spec's enum only; its meaning is not documented.
    public static let tax = Self(rawValue: "TAX")
    public static let knownValues: [Self] = [
        .sale, .fee, .return, .reversal, .reversalMerchantProtection, .commission, .correction, .holdback, .release,
        .charge, .credit, .feeRefund, .tax,
    ]
}

/// Settlements `Transaction.detailed_type`: the spec's enum plus `LIABILITY_TRANSFER` from Klarna's settlement
/// report page. The lists differ between Klarna's pages, spec and SDKs (§3), so this stays open too.
public struct SettlementDetailedType: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let purchase = Self(rawValue: "PURCHASE")
    public static let purchaseReturn = Self(rawValue: "PURCHASE_RETURN")
    public static let purchaseFeeFixed = Self(rawValue: "PURCHASE_FEE_FIXED")
    public static let purchaseFeePercentage = Self(rawValue: "PURCHASE_FEE_PERCENTAGE")
    public static let purchaseFeePercentageRefund = Self(rawValue: "PURCHASE_FEE_PERCENTAGE_REFUND")
    public static let purchaseCommissionPercentage = Self(rawValue: "PURCHASE_COMMISSION_PERCENTAGE")
    public static let percentageFees = Self(rawValue: "PERCENTAGE_FEES")
    public static let lateReturnFee = Self(rawValue: "LATE_RETURN_FEE")
    public static let returnFee = Self(rawValue: "RETURN_FEE")
    public static let expiryFee = Self(rawValue: "EXPIRY_FEE")
    public static let expiryFeeGross = Self(rawValue: "EXPIRY_FEE_GROSS")
    public static let servicingFee = Self(rawValue: "SERVICING_FEE")
    public static let extraInvoiceFee = Self(rawValue: "EXTRA_INVOICE_FEE")
    public static let extendDueDateFee = Self(rawValue: "EXTEND_DUE_DATE_FEE")
    public static let feeRefund = Self(rawValue: "FEE_REFUND")
    public static let commission = Self(rawValue: "COMMISSION")
    public static let commissionReturn = Self(rawValue: "COMMISSION_RETURN")
    public static let commissionReturnGross = Self(rawValue: "COMMISSION_RETURN_GROSS")
    public static let reversal = Self(rawValue: "REVERSAL")
    public static let fraudPolicyCharge = Self(rawValue: "FRAUD_POLICY_CHARGE")
    public static let fraudPolicyCreditNet = Self(rawValue: "FRAUD_POLICY_CREDIT_NET")
    /// Klarna registered the return: the customer failed to pay.
    public static let paymentDefault = Self(rawValue: "PAYMENT_DEFAULT")
    public static let disputeFee = Self(rawValue: "DISPUTE_FEE")
    public static let disputeFeeRefund = Self(rawValue: "DISPUTE_FEE_REFUND")
    public static let correctionDispute = Self(rawValue: "CORRECTION_DISPUTE")
    public static let correction = Self(rawValue: "CORRECTION")
    public static let creditedCorrection = Self(rawValue: "CREDITED_CORRECTION")
    public static let fixedFeeCorrection = Self(rawValue: "FIXED_FEE_CORRECTION")
    public static let percentageFeeCorrection = Self(rawValue: "PERCENTAGE_FEE_CORRECTION")
    public static let fixedFeeCorrectionUK = Self(rawValue: "FIXED_FEE_CORRECTION_UK")
    public static let percentageFeeCorrectionUK = Self(rawValue: "PERCENTAGE_FEE_CORRECTION_UK")
    public static let vatOnFeeCorrectionUK = Self(rawValue: "VAT_ON_FEE_CORRECTION_UK")
    public static let fixedFeeCorrectionSE = Self(rawValue: "FIXED_FEE_CORRECTION_SE")
    public static let percentageFeeCorrectionSE = Self(rawValue: "PERCENTAGE_FEE_CORRECTION_SE")
    public static let rollingReserve = Self(rawValue: "ROLLING_RESERVE")
    public static let underReview = Self(rawValue: "UNDER_REVIEW")
    public static let insufficientBankAccountDetails = Self(rawValue: "INSUFFICIENT_BANK_ACCOUNT_DETAILS")
    public static let paymentReminder = Self(rawValue: "PAYMENT_REMINDER")
    public static let manualEntry = Self(rawValue: "MANUAL_ENTRY")
    public static let loanPayout = Self(rawValue: "LOAN_PAYOUT")
    public static let loanAmortisation = Self(rawValue: "LOAN_AMORTISATION")
    public static let loanFee = Self(rawValue: "LOAN_FEE")
    public static let transferFromLegacyIntegration = Self(rawValue: "TRANSFER_FROM_LEGACY_INTEGRATION")
    /// On Klarna's settlement report page, not in the spec's enum.
    public static let liabilityTransfer = Self(rawValue: "LIABILITY_TRANSFER")
    public static let knownValues: [Self] = [
        .purchase, .purchaseReturn, .purchaseFeeFixed, .purchaseFeePercentage, .purchaseFeePercentageRefund,
        .purchaseCommissionPercentage, .percentageFees, .lateReturnFee, .returnFee, .expiryFee, .expiryFeeGross,
        .servicingFee, .extraInvoiceFee, .extendDueDateFee, .feeRefund, .commission, .commissionReturn,
        .commissionReturnGross, .reversal, .fraudPolicyCharge, .fraudPolicyCreditNet, .paymentDefault, .disputeFee,
        .disputeFeeRefund, .correctionDispute, .correction, .creditedCorrection, .fixedFeeCorrection,
        .percentageFeeCorrection, .fixedFeeCorrectionUK, .percentageFeeCorrectionUK, .vatOnFeeCorrectionUK,
        .fixedFeeCorrectionSE, .percentageFeeCorrectionSE, .rollingReserve, .underReview,
        .insufficientBankAccountDetails, .paymentReminder, .manualEntry, .loanPayout, .loanAmortisation, .loanFee,
        .transferFromLegacyIntegration, .liabilityTransfer,
    ]
}

/// Payout `merchant_settlement_type`: how Klarna's fees reach the merchant.
public struct MerchantSettlementType: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Fees deducted from the payout.
    public static let net = Self(rawValue: "NET")
    /// Fees invoiced separately.
    public static let gross = Self(rawValue: "GROSS")
    /// A fee invoice.
    public static let grossFee = Self(rawValue: "GROSS_FEE")
    public static let knownValues: [Self] = [.net, .gross, .grossFee]
}
