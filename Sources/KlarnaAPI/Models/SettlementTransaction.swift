import Foundation

/// One row of `GET /settlements/v1/transactions` (Klarna's Settlements API reference). Klarna gives rows no id of their own: the
/// reconciler keys them on their fields (§5).
///
/// `amount` is kept as Klarna sends it: which sign each type has in the JSON is not documented, so the sign is the
/// matcher's call, from ``type``.
public struct SettlementTransaction: Codable, Hashable, Sendable {
    /// Minor units of ``currencyCode``.
    public var amount: Int
    public var type: SettlementTransactionType
    public var detailedType: SettlementDetailedType?
    /// The KP/OM order id, "the recommended identifier for reconciling". Required by the spec, but whether rows that
    /// belong to no order (HOLDBACK, CHARGE, …) carry one is not documented.
    public var orderID: String?
    /// The customer-facing order id.
    public var shortOrderID: String?
    /// The OM capture id, on SALE and FEE rows. Klarna sends "" where there is no capture (RETURN, REVERSAL): nil.
    public var captureID: String?
    /// The OM refund id, on RETURN/REVERSAL rows, one per partial return; "" reads as nil as for ``captureID``.
    public var refundID: String?
    /// The payout this row is part of, once there is one.
    public var paymentReference: String?
    /// Klarna's URL of that payout.
    public var payoutLink: String?
    /// When the order was created.
    public var saleDate: Date
    /// When Klarna registered this event; for a SALE, the capture.
    public var captureDate: Date
    public var merchantReference1: String?
    public var merchantReference2: String?
    /// The `reference` given to the OM capture.
    public var merchantCaptureReference: String?
    /// The `reference` given to the OM refund.
    public var merchantRefundReference: String?
    public var currencyCode: String
    /// Required by the spec; optional here because rows without an order (HOLDBACK, RELEASE…) may not carry one, and
    /// one such row must not make a whole page unreadable.
    public var purchaseCountry: String?
    public var shippingCountry: String?
    /// VAT on Klarna's fee, minor units.
    public var vatAmount: Int?
    /// VAT rate on Klarna's fee; its scale is not documented (Klarna's example: 2000).
    public var vatRate: Int?
    /// ``vatAmount`` in the currency of the merchant's registration country, at the capture date's rate.
    public var taxInCurrencyOfRegistrationCountry: Int?
    public var currencyCodeOfRegistrationCountry: String?
    public var initialPaymentMethodType: String?
    public var initialNumberOfInstallments: Int?
    public var initialPaymentMethodMonthlyDownpayments: Int?
    public var klarnaComment: String?
    /// The dispute (DisputeKRN) behind a REVERSAL: the only link from such a row to anything the merchant did.
    public var reversalReference: String?
    /// Only in third-party schemas, not in Klarna's spec.
    public var merchantID: String?
    /// Only in third-party schemas, not in Klarna's spec.
    public var shippingAddressCountry: String?

    public init(
        amount: Int, type: SettlementTransactionType, detailedType: SettlementDetailedType? = nil,
        orderID: String? = nil, shortOrderID: String? = nil, captureID: String? = nil, refundID: String? = nil,
        paymentReference: String? = nil, payoutLink: String? = nil, saleDate: Date, captureDate: Date,
        merchantReference1: String? = nil, merchantReference2: String? = nil, merchantCaptureReference: String? = nil,
        merchantRefundReference: String? = nil, currencyCode: String, purchaseCountry: String? = nil,
        shippingCountry: String? = nil, vatAmount: Int? = nil, vatRate: Int? = nil,
        taxInCurrencyOfRegistrationCountry: Int? = nil, currencyCodeOfRegistrationCountry: String? = nil,
        initialPaymentMethodType: String? = nil, initialNumberOfInstallments: Int? = nil,
        initialPaymentMethodMonthlyDownpayments: Int? = nil, klarnaComment: String? = nil,
        reversalReference: String? = nil, merchantID: String? = nil, shippingAddressCountry: String? = nil
    ) {
        self.amount = amount
        self.type = type
        self.detailedType = detailedType
        self.orderID = orderID
        self.shortOrderID = shortOrderID
        self.captureID = captureID
        self.refundID = refundID
        self.paymentReference = paymentReference
        self.payoutLink = payoutLink
        self.saleDate = saleDate
        self.captureDate = captureDate
        self.merchantReference1 = merchantReference1
        self.merchantReference2 = merchantReference2
        self.merchantCaptureReference = merchantCaptureReference
        self.merchantRefundReference = merchantRefundReference
        self.currencyCode = currencyCode
        self.purchaseCountry = purchaseCountry
        self.shippingCountry = shippingCountry
        self.vatAmount = vatAmount
        self.vatRate = vatRate
        self.taxInCurrencyOfRegistrationCountry = taxInCurrencyOfRegistrationCountry
        self.currencyCodeOfRegistrationCountry = currencyCodeOfRegistrationCountry
        self.initialPaymentMethodType = initialPaymentMethodType
        self.initialNumberOfInstallments = initialNumberOfInstallments
        self.initialPaymentMethodMonthlyDownpayments = initialPaymentMethodMonthlyDownpayments
        self.klarnaComment = klarnaComment
        self.reversalReference = reversalReference
        self.merchantID = merchantID
        self.shippingAddressCountry = shippingAddressCountry
    }

    enum CodingKeys: String, CodingKey {
        case amount, type, detailedType = "detailed_type", orderID = "order_id", shortOrderID = "short_order_id"
        case captureID = "capture_id", refundID = "refund_id", paymentReference = "payment_reference"
        case payoutLink = "payout", saleDate = "sale_date", captureDate = "capture_date"
        case merchantReference1 = "merchant_reference1", merchantReference2 = "merchant_reference2"
        case merchantCaptureReference = "merchant_capture_reference", merchantRefundReference = "merchant_refund_reference"
        case currencyCode = "currency_code", purchaseCountry = "purchase_country", shippingCountry = "shipping_country"
        case vatAmount = "vat_amount", vatRate = "vat_rate"
        case taxInCurrencyOfRegistrationCountry = "tax_in_currency_of_registration_country"
        case currencyCodeOfRegistrationCountry = "currency_code_of_registration_country"
        case initialPaymentMethodType = "initial_payment_method_type"
        case initialNumberOfInstallments = "initial_number_of_installments"
        case initialPaymentMethodMonthlyDownpayments = "initial_payment_method_monthly_downpayments"
        case klarnaComment = "klarna_comment", reversalReference = "reversal_reference", merchantID = "merchant_id"
        case shippingAddressCountry = "shipping_address_country"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func id(_ key: CodingKeys) throws -> String? {
            guard let value = try c.decodeIfPresent(String.self, forKey: key), !value.isEmpty else { return nil }
            return value
        }
        amount = try c.decode(Int.self, forKey: .amount)
        type = try c.decode(SettlementTransactionType.self, forKey: .type)
        detailedType = try c.decodeIfPresent(SettlementDetailedType.self, forKey: .detailedType)
        orderID = try c.decodeIfPresent(String.self, forKey: .orderID)
        shortOrderID = try c.decodeIfPresent(String.self, forKey: .shortOrderID)
        captureID = try id(.captureID)
        refundID = try id(.refundID)
        paymentReference = try c.decodeIfPresent(String.self, forKey: .paymentReference)
        payoutLink = try c.decodeIfPresent(String.self, forKey: .payoutLink)
        saleDate = try c.decode(Date.self, forKey: .saleDate)
        captureDate = try c.decode(Date.self, forKey: .captureDate)
        merchantReference1 = try c.decodeIfPresent(String.self, forKey: .merchantReference1)
        merchantReference2 = try c.decodeIfPresent(String.self, forKey: .merchantReference2)
        merchantCaptureReference = try c.decodeIfPresent(String.self, forKey: .merchantCaptureReference)
        merchantRefundReference = try c.decodeIfPresent(String.self, forKey: .merchantRefundReference)
        currencyCode = try c.decode(String.self, forKey: .currencyCode)
        purchaseCountry = try c.decodeIfPresent(String.self, forKey: .purchaseCountry)
        shippingCountry = try c.decodeIfPresent(String.self, forKey: .shippingCountry)
        vatAmount = try c.decodeIfPresent(Int.self, forKey: .vatAmount)
        vatRate = try c.decodeIfPresent(Int.self, forKey: .vatRate)
        taxInCurrencyOfRegistrationCountry = try c.decodeIfPresent(Int.self, forKey: .taxInCurrencyOfRegistrationCountry)
        currencyCodeOfRegistrationCountry = try c.decodeIfPresent(String.self, forKey: .currencyCodeOfRegistrationCountry)
        initialPaymentMethodType = try c.decodeIfPresent(String.self, forKey: .initialPaymentMethodType)
        initialNumberOfInstallments = try c.decodeIfPresent(Int.self, forKey: .initialNumberOfInstallments)
        initialPaymentMethodMonthlyDownpayments = try c.decodeIfPresent(Int.self, forKey: .initialPaymentMethodMonthlyDownpayments)
        klarnaComment = try c.decodeIfPresent(String.self, forKey: .klarnaComment)
        reversalReference = try c.decodeIfPresent(String.self, forKey: .reversalReference)
        merchantID = try c.decodeIfPresent(String.self, forKey: .merchantID)
        shippingAddressCountry = try c.decodeIfPresent(String.self, forKey: .shippingAddressCountry)
    }
}
