import Foundation
import ReconcilerCore

/// `GET /settlements/v1/payouts/{payment_reference}`: one bank transfer from Klarna, in one currency.
public struct Payout: Codable, Hashable, Sendable {
    public var totals: PayoutTotals
    /// The note on the bank transfer: the key from a bank statement to this payout and its transactions.
    public var paymentReference: String
    /// When Klarna initiated the payout; the money arrives about one banking day later.
    public var payoutDate: Date
    public var currencyCode: String
    public var merchantSettlementType: MerchantSettlementType
    public var merchantID: String
    public var currencyCodeOfRegistrationCountry: String?
    /// Klarna's URL of this payout's transactions (`/transactions?payment_reference=…`).
    public var transactionsLink: String?

    public init(
        totals: PayoutTotals, paymentReference: String, payoutDate: Date, currencyCode: String,
        merchantSettlementType: MerchantSettlementType, merchantID: String,
        currencyCodeOfRegistrationCountry: String? = nil, transactionsLink: String? = nil
    ) {
        self.totals = totals
        self.paymentReference = paymentReference
        self.payoutDate = payoutDate
        self.currencyCode = currencyCode
        self.merchantSettlementType = merchantSettlementType
        self.merchantID = merchantID
        self.currencyCodeOfRegistrationCountry = currencyCodeOfRegistrationCountry
        self.transactionsLink = transactionsLink
    }

    enum CodingKeys: String, CodingKey {
        case totals, paymentReference = "payment_reference", payoutDate = "payout_date", currencyCode = "currency_code"
        case merchantSettlementType = "merchant_settlement_type", merchantID = "merchant_id"
        case currencyCodeOfRegistrationCountry = "currency_code_of_registration_country"
        case transactionsLink = "transactions"
    }
}

/// A payout's `totals`, in minor units, as Klarna states them (Klarna's Settlements API reference has the formula relating them).
///
/// The spec requires every total but `tax_amount` and `fee_correction_amount`, yet Klarna's illustrations leave zero
/// totals out: a missing required total decodes as 0. `settlement_amount` is the exception: it is what reached the
/// bank, so a payout without it is refused rather than read as a payout of nothing. The totals the spec does not
/// require stay optional, so "not sent" remains distinguishable from 0.
public struct PayoutTotals: Codable, Hashable, Sendable {
    /// What was paid out: the sum the bank statement shows.
    public var settlementAmount: Int
    public var saleAmount: Int
    public var returnAmount: Int
    /// Σ REVERSAL − Σ REVERSAL_MERCHANT_PROTECTION.
    public var reversalAmount: Int
    public var feeAmount: Int
    /// Σ `vat_amount` of the transactions (VAT on Klarna's fees); there is no TAX row to match it against.
    public var taxAmount: Int?
    /// Totals only: no transaction type carries it.
    public var feeCorrectionAmount: Int?
    public var feeRefundAmount: Int
    /// Outside the payout formula.
    public var taxRefundAmount: Int
    public var commissionAmount: Int
    /// Only in a third-party SDK's schema, not in Klarna's spec.
    public var commissionReversalAmount: Int?
    public var chargeAmount: Int
    public var creditAmount: Int
    public var holdbackAmount: Int
    public var releaseAmount: Int
    /// Debt to Klarna repaid from this payout (totals only).
    public var repayAmount: Int
    /// Debt added by this payout: `closing = opening − repay + deposit`. Outside the payout formula.
    public var depositAmount: Int
    public var openingDebtBalanceAmount: Int
    public var closingDebtBalanceAmount: Int

    public init(
        settlementAmount: Int, saleAmount: Int = 0, returnAmount: Int = 0, reversalAmount: Int = 0, feeAmount: Int = 0,
        taxAmount: Int? = nil, feeCorrectionAmount: Int? = nil, feeRefundAmount: Int = 0, taxRefundAmount: Int = 0,
        commissionAmount: Int = 0, commissionReversalAmount: Int? = nil, chargeAmount: Int = 0, creditAmount: Int = 0,
        holdbackAmount: Int = 0, releaseAmount: Int = 0, repayAmount: Int = 0, depositAmount: Int = 0,
        openingDebtBalanceAmount: Int = 0, closingDebtBalanceAmount: Int = 0
    ) {
        self.settlementAmount = settlementAmount
        self.saleAmount = saleAmount
        self.returnAmount = returnAmount
        self.reversalAmount = reversalAmount
        self.feeAmount = feeAmount
        self.taxAmount = taxAmount
        self.feeCorrectionAmount = feeCorrectionAmount
        self.feeRefundAmount = feeRefundAmount
        self.taxRefundAmount = taxRefundAmount
        self.commissionAmount = commissionAmount
        self.commissionReversalAmount = commissionReversalAmount
        self.chargeAmount = chargeAmount
        self.creditAmount = creditAmount
        self.holdbackAmount = holdbackAmount
        self.releaseAmount = releaseAmount
        self.repayAmount = repayAmount
        self.depositAmount = depositAmount
        self.openingDebtBalanceAmount = openingDebtBalanceAmount
        self.closingDebtBalanceAmount = closingDebtBalanceAmount
    }

    enum CodingKeys: String, CodingKey {
        case settlementAmount = "settlement_amount", saleAmount = "sale_amount", returnAmount = "return_amount"
        case reversalAmount = "reversal_amount", feeAmount = "fee_amount", taxAmount = "tax_amount"
        case feeCorrectionAmount = "fee_correction_amount", feeRefundAmount = "fee_refund_amount"
        case taxRefundAmount = "tax_refund_amount", commissionAmount = "commission_amount"
        case commissionReversalAmount = "commission_reversal_amount", chargeAmount = "charge_amount"
        case creditAmount = "credit_amount", holdbackAmount = "holdback_amount", releaseAmount = "release_amount"
        case repayAmount = "repay_amount", depositAmount = "deposit_amount"
        case openingDebtBalanceAmount = "opening_debt_balance_amount"
        case closingDebtBalanceAmount = "closing_debt_balance_amount"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func total(_ key: CodingKeys) throws -> Int { try c.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        settlementAmount = try c.decode(Int.self, forKey: .settlementAmount)
        saleAmount = try total(.saleAmount)
        returnAmount = try total(.returnAmount)
        reversalAmount = try total(.reversalAmount)
        feeAmount = try total(.feeAmount)
        taxAmount = try c.decodeIfPresent(Int.self, forKey: .taxAmount)
        feeCorrectionAmount = try c.decodeIfPresent(Int.self, forKey: .feeCorrectionAmount)
        feeRefundAmount = try total(.feeRefundAmount)
        taxRefundAmount = try total(.taxRefundAmount)
        commissionAmount = try total(.commissionAmount)
        commissionReversalAmount = try c.decodeIfPresent(Int.self, forKey: .commissionReversalAmount)
        chargeAmount = try total(.chargeAmount)
        creditAmount = try total(.creditAmount)
        holdbackAmount = try total(.holdbackAmount)
        releaseAmount = try total(.releaseAmount)
        repayAmount = try total(.repayAmount)
        depositAmount = try total(.depositAmount)
        openingDebtBalanceAmount = try total(.openingDebtBalanceAmount)
        closingDebtBalanceAmount = try total(.closingDebtBalanceAmount)
    }
}

/// One element of `GET /settlements/v1/payouts/summary`: the payouts of a date range in one currency, summed.
/// Same decoding rule as ``PayoutTotals``: a missing total is 0, except the settlement amount.
public struct PayoutSummary: Codable, Hashable, Sendable {
    public var payoutDateStart: Date
    public var payoutDateEnd: Date
    public var settlementCurrency: String
    public var totalSettlementAmount: Int
    public var totalSaleAmount: Int
    public var totalReturnAmount: Int
    public var totalReversalAmount: Int
    public var totalFeeAmount: Int
    public var totalFeeCorrectionAmount: Int
    public var totalTaxAmount: Int
    public var totalCommissionAmount: Int
    public var totalHoldbackAmount: Int
    public var totalReleaseAmount: Int
    public var totalRepayAmount: Int

    public init(
        payoutDateStart: Date, payoutDateEnd: Date, settlementCurrency: String, totalSettlementAmount: Int,
        totalSaleAmount: Int = 0, totalReturnAmount: Int = 0, totalReversalAmount: Int = 0, totalFeeAmount: Int = 0,
        totalFeeCorrectionAmount: Int = 0, totalTaxAmount: Int = 0, totalCommissionAmount: Int = 0,
        totalHoldbackAmount: Int = 0, totalReleaseAmount: Int = 0, totalRepayAmount: Int = 0
    ) {
        self.payoutDateStart = payoutDateStart
        self.payoutDateEnd = payoutDateEnd
        self.settlementCurrency = settlementCurrency
        self.totalSettlementAmount = totalSettlementAmount
        self.totalSaleAmount = totalSaleAmount
        self.totalReturnAmount = totalReturnAmount
        self.totalReversalAmount = totalReversalAmount
        self.totalFeeAmount = totalFeeAmount
        self.totalFeeCorrectionAmount = totalFeeCorrectionAmount
        self.totalTaxAmount = totalTaxAmount
        self.totalCommissionAmount = totalCommissionAmount
        self.totalHoldbackAmount = totalHoldbackAmount
        self.totalReleaseAmount = totalReleaseAmount
        self.totalRepayAmount = totalRepayAmount
    }

    enum CodingKeys: String, CodingKey {
        case payoutDateStart = "summary_payout_date_start", payoutDateEnd = "summary_payout_date_end"
        case settlementCurrency = "summary_settlement_currency"
        case totalSettlementAmount = "summary_total_settlement_amount", totalSaleAmount = "summary_total_sale_amount"
        case totalReturnAmount = "summary_total_return_amount", totalReversalAmount = "summary_total_reversal_amount"
        case totalFeeAmount = "summary_total_fee_amount", totalFeeCorrectionAmount = "summary_total_fee_correction_amount"
        case totalTaxAmount = "summary_total_tax_amount", totalCommissionAmount = "summary_total_commission_amount"
        case totalHoldbackAmount = "summary_total_holdback_amount", totalReleaseAmount = "summary_total_release_amount"
        case totalRepayAmount = "summary_total_repay_amount"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func total(_ key: CodingKeys) throws -> Int { try c.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        payoutDateStart = try c.decode(Date.self, forKey: .payoutDateStart)
        payoutDateEnd = try c.decode(Date.self, forKey: .payoutDateEnd)
        settlementCurrency = try c.decode(String.self, forKey: .settlementCurrency)
        totalSettlementAmount = try c.decode(Int.self, forKey: .totalSettlementAmount)
        totalSaleAmount = try total(.totalSaleAmount)
        totalReturnAmount = try total(.totalReturnAmount)
        totalReversalAmount = try total(.totalReversalAmount)
        totalFeeAmount = try total(.totalFeeAmount)
        totalFeeCorrectionAmount = try total(.totalFeeCorrectionAmount)
        totalTaxAmount = try total(.totalTaxAmount)
        totalCommissionAmount = try total(.totalCommissionAmount)
        totalHoldbackAmount = try total(.totalHoldbackAmount)
        totalReleaseAmount = try total(.totalReleaseAmount)
        totalRepayAmount = try total(.totalRepayAmount)
    }
}

/// A Settlements collection's `pagination`. `next`/`prev` are Klarna's URLs; ``KlarnaClient`` pages by offset.
public struct SettlementPagination: Codable, Hashable, Sendable {
    /// Elements on this page.
    public var count: Int
    /// Elements in the whole collection.
    public var total: Int?
    /// Where this page starts in the collection.
    public var offset: Int?
    public var next: String?
    public var prev: String?

    public init(count: Int, total: Int? = nil, offset: Int? = nil, next: String? = nil, prev: String? = nil) {
        self.count = count
        self.total = total
        self.offset = offset
        self.next = next
        self.prev = prev
    }

    enum CodingKeys: String, CodingKey {
        case count, total, offset, next, prev
    }
}

/// `GET /settlements/v1/payouts`.
public struct PayoutPage: Codable, Hashable, Sendable {
    public var payouts: [Payout]
    public var pagination: SettlementPagination

    public init(payouts: [Payout], pagination: SettlementPagination) {
        self.payouts = payouts
        self.pagination = pagination
    }

    enum CodingKeys: String, CodingKey {
        case payouts, pagination
    }
}

/// `GET /settlements/v1/transactions`.
public struct TransactionPage: Codable, Hashable, Sendable {
    public var transactions: [SettlementTransaction]
    public var pagination: SettlementPagination

    public init(transactions: [SettlementTransaction], pagination: SettlementPagination) {
        self.transactions = transactions
        self.pagination = pagination
    }

    enum CodingKeys: String, CodingKey {
        case transactions, pagination
    }
}
