import Foundation
import ReconcilerCore

/// One order line; amounts are integer minor units (cents), quantities whole units.
public struct OrderLine: Codable, Hashable, Sendable {
    public var type: String?
    public var reference: String?
    public var name: String
    public var quantity: Int
    public var quantityUnit: String?
    public var unitPrice: Int
    public var taxRate: Int?
    public var totalAmount: Int
    public var totalDiscountAmount: Int?
    public var totalTaxAmount: Int?
    public var merchantData: String?
    public var productURL: String?
    public var imageURL: String?
    /// Brand, category, GTIN and the like, kept as received.
    public var productIdentifiers: JSONValue?
    /// The subscription the line is for, kept as received.
    public var subscription: JSONValue?

    public init(
        type: String? = nil, reference: String? = nil, name: String, quantity: Int, quantityUnit: String? = nil,
        unitPrice: Int, taxRate: Int? = nil, totalAmount: Int, totalDiscountAmount: Int? = nil,
        totalTaxAmount: Int? = nil, merchantData: String? = nil, productURL: String? = nil, imageURL: String? = nil,
        productIdentifiers: JSONValue? = nil, subscription: JSONValue? = nil
    ) {
        self.type = type
        self.reference = reference
        self.name = name
        self.quantity = quantity
        self.quantityUnit = quantityUnit
        self.unitPrice = unitPrice
        self.taxRate = taxRate
        self.totalAmount = totalAmount
        self.totalDiscountAmount = totalDiscountAmount
        self.totalTaxAmount = totalTaxAmount
        self.merchantData = merchantData
        self.productURL = productURL
        self.imageURL = imageURL
        self.productIdentifiers = productIdentifiers
        self.subscription = subscription
    }

    enum CodingKeys: String, CodingKey {
        case type, reference, name, quantity, quantityUnit = "quantity_unit", unitPrice = "unit_price"
        case taxRate = "tax_rate", totalAmount = "total_amount", totalDiscountAmount = "total_discount_amount"
        case totalTaxAmount = "total_tax_amount", merchantData = "merchant_data", productURL = "product_url"
        case imageURL = "image_url", productIdentifiers = "product_identifiers", subscription
    }
}

/// `GET /payments/v1/sessions/{id}` (session_read): what the consumer authorized, used to build the order.
///
/// The spec requires none of its fields, so each is optional here. A KP session is created with `session_create`'s
/// required purchase country, currency, amount and lines, and create-order requires the same four again: a read that
/// lacks one (``missingOrderFields``) cannot be turned into an order, and nothing is sent.
public struct PaymentSession: Codable, Hashable, Sendable {
    /// Absent: not known to be complete.
    public var status: PaymentSessionStatus?
    /// Absent: neither an order nor a customer token can be asked for.
    public var purchaseCountry: String?
    /// Absent: neither an order nor a customer token can be asked for.
    public var purchaseCurrency: String?
    /// Absent: the customer token is asked for in `en-US` (its request requires a locale).
    public var locale: String?
    /// Absent: no order can be asked for.
    public var orderAmount: Int?
    /// Absent: the order is asked for without one (create-order does not require it).
    public var orderTaxAmount: Int?
    /// Absent reads as none; without one no order can be asked for.
    public var orderLines: [OrderLine]
    public var expiresAt: Date?
    public var authorizationToken: String?
    public var merchantReference1: String?
    public var merchantReference2: String?
    public var merchantData: String?
    public var billingAddress: JSONValue?
    public var shippingAddress: JSONValue?
    public var customer: JSONValue?
    public var merchantURLs: JSONValue?
    /// Promo codes the session offers, passed on to the order.
    public var customPaymentMethodIDs: [String]?
    public var intent: PaymentIntent?

    public init(
        status: PaymentSessionStatus? = nil, purchaseCountry: String? = nil, purchaseCurrency: String? = nil,
        locale: String? = nil, orderAmount: Int? = nil, orderTaxAmount: Int? = nil, orderLines: [OrderLine] = [],
        expiresAt: Date? = nil, authorizationToken: String? = nil, merchantReference1: String? = nil,
        merchantReference2: String? = nil, merchantData: String? = nil, billingAddress: JSONValue? = nil,
        shippingAddress: JSONValue? = nil, customer: JSONValue? = nil, merchantURLs: JSONValue? = nil,
        customPaymentMethodIDs: [String]? = nil, intent: PaymentIntent? = nil
    ) {
        self.status = status
        self.purchaseCountry = purchaseCountry
        self.purchaseCurrency = purchaseCurrency
        self.locale = locale
        self.orderAmount = orderAmount
        self.orderTaxAmount = orderTaxAmount
        self.orderLines = orderLines
        self.expiresAt = expiresAt
        self.authorizationToken = authorizationToken
        self.merchantReference1 = merchantReference1
        self.merchantReference2 = merchantReference2
        self.merchantData = merchantData
        self.billingAddress = billingAddress
        self.shippingAddress = shippingAddress
        self.customer = customer
        self.merchantURLs = merchantURLs
        self.customPaymentMethodIDs = customPaymentMethodIDs
        self.intent = intent
    }

    /// The fields create-order requires (`create_order_request`) that this read lacks, by their JSON names.
    public var missingOrderFields: [String] {
        [
            purchaseCountry == nil ? "purchase_country" : nil, purchaseCurrency == nil ? "purchase_currency" : nil,
            orderAmount == nil ? "order_amount" : nil, orderLines.isEmpty ? "order_lines" : nil,
        ].compactMap { $0 }
    }

    /// The fields a customer token's request requires from the session that this read lacks, by their JSON names.
    public var missingCustomerTokenFields: [String] {
        [purchaseCountry == nil ? "purchase_country" : nil, purchaseCurrency == nil ? "purchase_currency" : nil].compactMap { $0 }
    }

    enum CodingKeys: String, CodingKey {
        case status, purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale
        case orderAmount = "order_amount", orderTaxAmount = "order_tax_amount", orderLines = "order_lines"
        case expiresAt = "expires_at", authorizationToken = "authorization_token"
        case merchantReference1 = "merchant_reference1", merchantReference2 = "merchant_reference2"
        case merchantData = "merchant_data", billingAddress = "billing_address", shippingAddress = "shipping_address"
        case customer, merchantURLs = "merchant_urls", customPaymentMethodIDs = "custom_payment_method_ids", intent
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        status = try c.decodeIfPresent(PaymentSessionStatus.self, forKey: .status)
        purchaseCountry = try c.decodeIfPresent(String.self, forKey: .purchaseCountry)
        purchaseCurrency = try c.decodeIfPresent(String.self, forKey: .purchaseCurrency)
        locale = try c.decodeIfPresent(String.self, forKey: .locale)
        orderAmount = try c.decodeIfPresent(Int.self, forKey: .orderAmount)
        orderTaxAmount = try c.decodeIfPresent(Int.self, forKey: .orderTaxAmount)
        orderLines = try c.decodeIfPresent([OrderLine].self, forKey: .orderLines) ?? []
        expiresAt = try c.decodeIfPresent(Date.self, forKey: .expiresAt)
        authorizationToken = try c.decodeIfPresent(String.self, forKey: .authorizationToken)
        merchantReference1 = try c.decodeIfPresent(String.self, forKey: .merchantReference1)
        merchantReference2 = try c.decodeIfPresent(String.self, forKey: .merchantReference2)
        merchantData = try c.decodeIfPresent(String.self, forKey: .merchantData)
        billingAddress = try c.decodeIfPresent(JSONValue.self, forKey: .billingAddress)
        shippingAddress = try c.decodeIfPresent(JSONValue.self, forKey: .shippingAddress)
        customer = try c.decodeIfPresent(JSONValue.self, forKey: .customer)
        merchantURLs = try c.decodeIfPresent(JSONValue.self, forKey: .merchantURLs)
        customPaymentMethodIDs = try c.decodeIfPresent([String].self, forKey: .customPaymentMethodIDs)
        intent = try c.decodeIfPresent(PaymentIntent.self, forKey: .intent)
    }
}

/// A Klarna document lacks fields that a request built from it requires, so that request cannot be made.
public struct MissingFields: Error, Hashable, Sendable, CustomStringConvertible {
    /// The JSON names of the missing fields.
    public var fields: [String]

    public init(_ fields: [String]) {
        self.fields = fields
    }

    public var description: String { "missing \(fields.joined(separator: ", "))" }
}

/// `POST /payments/v1/authorizations/{token}/order`. The data must match the authorized session (else 409).
public struct CreateOrderRequest: Codable, Hashable, Sendable {
    public var purchaseCountry: String
    public var purchaseCurrency: String
    public var locale: String?
    public var orderAmount: Int
    public var orderTaxAmount: Int?
    public var orderLines: [OrderLine]
    public var billingAddress: JSONValue?
    public var shippingAddress: JSONValue?
    public var customer: JSONValue?
    public var merchantReference1: String?
    public var merchantReference2: String?
    public var merchantData: String?
    public var merchantURLs: JSONValue?
    public var customPaymentMethodIDs: [String]?
    public var autoCapture: Bool?

    public init(
        purchaseCountry: String, purchaseCurrency: String, locale: String? = nil, orderAmount: Int,
        orderTaxAmount: Int? = nil, orderLines: [OrderLine], billingAddress: JSONValue? = nil,
        shippingAddress: JSONValue? = nil, customer: JSONValue? = nil, merchantReference1: String? = nil,
        merchantReference2: String? = nil, merchantData: String? = nil, merchantURLs: JSONValue? = nil,
        customPaymentMethodIDs: [String]? = nil, autoCapture: Bool? = nil
    ) {
        self.purchaseCountry = purchaseCountry
        self.purchaseCurrency = purchaseCurrency
        self.locale = locale
        self.orderAmount = orderAmount
        self.orderTaxAmount = orderTaxAmount
        self.orderLines = orderLines
        self.billingAddress = billingAddress
        self.shippingAddress = shippingAddress
        self.customer = customer
        self.merchantReference1 = merchantReference1
        self.merchantReference2 = merchantReference2
        self.merchantData = merchantData
        self.merchantURLs = merchantURLs
        self.customPaymentMethodIDs = customPaymentMethodIDs
        self.autoCapture = autoCapture
    }

    /// The order exactly as the consumer authorized it in `session`; `merchantReference` overrides reference 1.
    /// Throws when the read lacks a field create-order requires (``PaymentSession/missingOrderFields``).
    public init(session: PaymentSession, merchantReference: String? = nil) throws(MissingFields) {
        guard let purchaseCountry = session.purchaseCountry, let purchaseCurrency = session.purchaseCurrency,
            let orderAmount = session.orderAmount, !session.orderLines.isEmpty
        else { throw MissingFields(session.missingOrderFields) }
        self.init(
            purchaseCountry: purchaseCountry, purchaseCurrency: purchaseCurrency, locale: session.locale,
            orderAmount: orderAmount, orderTaxAmount: session.orderTaxAmount, orderLines: session.orderLines,
            billingAddress: session.billingAddress, shippingAddress: session.shippingAddress, customer: session.customer,
            merchantReference1: merchantReference ?? session.merchantReference1,
            merchantReference2: session.merchantReference2, merchantData: session.merchantData,
            merchantURLs: session.merchantURLs, customPaymentMethodIDs: session.customPaymentMethodIDs
        )
    }

    enum CodingKeys: String, CodingKey {
        case purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale
        case orderAmount = "order_amount", orderTaxAmount = "order_tax_amount", orderLines = "order_lines"
        case billingAddress = "billing_address", shippingAddress = "shipping_address", customer
        case merchantReference1 = "merchant_reference1", merchantReference2 = "merchant_reference2"
        case merchantData = "merchant_data", merchantURLs = "merchant_urls"
        case customPaymentMethodIDs = "custom_payment_method_ids", autoCapture = "auto_capture"
    }
}

/// KP's answer to create-order (`order`): only `order_id` is required.
public struct CreateOrderResponse: Codable, Hashable, Sendable {
    public var orderID: String
    /// Absent: the fraud decision is not known, so nothing is captured before the order is read from OM.
    public var fraudStatus: FraudStatus?
    public var redirectURL: String?
    /// A string in Klarna's doc example, an object in its spec: kept as received.
    public var authorizedPaymentMethod: JSONValue?

    public init(orderID: String, fraudStatus: FraudStatus? = nil, redirectURL: String? = nil, authorizedPaymentMethod: JSONValue? = nil) {
        self.orderID = orderID
        self.fraudStatus = fraudStatus
        self.redirectURL = redirectURL
        self.authorizedPaymentMethod = authorizedPaymentMethod
    }

    enum CodingKeys: String, CodingKey {
        case orderID = "order_id", fraudStatus = "fraud_status", redirectURL = "redirect_url"
        case authorizedPaymentMethod = "authorized_payment_method"
    }
}

/// `POST /payments/v1/authorizations/{token}/customer-token`.
public struct CustomerTokenRequest: Codable, Hashable, Sendable {
    public var purchaseCountry: String
    public var purchaseCurrency: String
    public var locale: String
    public var description: String
    public var intendedUse: String
    public var billingAddress: JSONValue?
    public var customer: JSONValue?

    public init(
        purchaseCountry: String, purchaseCurrency: String, locale: String, description: String,
        intendedUse: String = "SUBSCRIPTION", billingAddress: JSONValue? = nil, customer: JSONValue? = nil
    ) {
        self.purchaseCountry = purchaseCountry
        self.purchaseCurrency = purchaseCurrency
        self.locale = locale
        self.description = description
        self.intendedUse = intendedUse
        self.billingAddress = billingAddress
        self.customer = customer
    }

    /// The token for the consumer who authorized `session`, in its locale (`en-US` when the read has none). Throws
    /// when the read lacks a field the request requires (``PaymentSession/missingCustomerTokenFields``).
    public init(session: PaymentSession, description: String) throws(MissingFields) {
        guard let purchaseCountry = session.purchaseCountry, let purchaseCurrency = session.purchaseCurrency else {
            throw MissingFields(session.missingCustomerTokenFields)
        }
        self.init(
            purchaseCountry: purchaseCountry, purchaseCurrency: purchaseCurrency, locale: session.locale ?? "en-US",
            description: description)
    }

    enum CodingKeys: String, CodingKey {
        case purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale, description
        case intendedUse = "intended_use", billingAddress = "billing_address", customer
    }
}

/// KP's answer to a customer token (`customer_token_creation_response`): only `token_id` is required.
public struct CustomerTokenResponse: Codable, Hashable, Sendable {
    public var tokenID: String
    public var redirectURL: String?
    public var paymentMethodReference: String?

    public init(tokenID: String, redirectURL: String? = nil, paymentMethodReference: String? = nil) {
        self.tokenID = tokenID
        self.redirectURL = redirectURL
        self.paymentMethodReference = paymentMethodReference
    }

    enum CodingKeys: String, CodingKey {
        case tokenID = "token_id", redirectURL = "redirect_url", paymentMethodReference = "payment_method_reference"
    }
}
