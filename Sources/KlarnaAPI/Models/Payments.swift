import Foundation

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

    public init(
        type: String? = nil, reference: String? = nil, name: String, quantity: Int, quantityUnit: String? = nil,
        unitPrice: Int, taxRate: Int? = nil, totalAmount: Int, totalDiscountAmount: Int? = nil,
        totalTaxAmount: Int? = nil, merchantData: String? = nil, productURL: String? = nil, imageURL: String? = nil
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
    }

    enum CodingKeys: String, CodingKey {
        case type, reference, name, quantity, quantityUnit = "quantity_unit", unitPrice = "unit_price"
        case taxRate = "tax_rate", totalAmount = "total_amount", totalDiscountAmount = "total_discount_amount"
        case totalTaxAmount = "total_tax_amount", merchantData = "merchant_data", productURL = "product_url"
        case imageURL = "image_url"
    }
}

/// `GET /payments/v1/sessions/{id}` (session_read): what the consumer authorized, used to build the order.
public struct PaymentSession: Codable, Hashable, Sendable {
    public var status: PaymentSessionStatus
    public var purchaseCountry: String
    public var purchaseCurrency: String
    public var locale: String?
    public var orderAmount: Int
    public var orderTaxAmount: Int?
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
    public var intent: PaymentIntent?

    public init(
        status: PaymentSessionStatus, purchaseCountry: String, purchaseCurrency: String, locale: String? = nil,
        orderAmount: Int, orderTaxAmount: Int? = nil, orderLines: [OrderLine], expiresAt: Date? = nil,
        authorizationToken: String? = nil, merchantReference1: String? = nil, merchantReference2: String? = nil,
        merchantData: String? = nil, billingAddress: JSONValue? = nil, shippingAddress: JSONValue? = nil,
        customer: JSONValue? = nil, merchantURLs: JSONValue? = nil, intent: PaymentIntent? = nil
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
        self.intent = intent
    }

    enum CodingKeys: String, CodingKey {
        case status, purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale
        case orderAmount = "order_amount", orderTaxAmount = "order_tax_amount", orderLines = "order_lines"
        case expiresAt = "expires_at", authorizationToken = "authorization_token"
        case merchantReference1 = "merchant_reference1", merchantReference2 = "merchant_reference2"
        case merchantData = "merchant_data", billingAddress = "billing_address", shippingAddress = "shipping_address"
        case customer, merchantURLs = "merchant_urls", intent
    }
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
    public var autoCapture: Bool?

    public init(
        purchaseCountry: String, purchaseCurrency: String, locale: String? = nil, orderAmount: Int,
        orderTaxAmount: Int? = nil, orderLines: [OrderLine], billingAddress: JSONValue? = nil,
        shippingAddress: JSONValue? = nil, customer: JSONValue? = nil, merchantReference1: String? = nil,
        merchantReference2: String? = nil, merchantData: String? = nil, merchantURLs: JSONValue? = nil,
        autoCapture: Bool? = nil
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
        self.autoCapture = autoCapture
    }

    /// The order exactly as the consumer authorized it in `session`; `merchantReference` overrides reference 1.
    public init(session: PaymentSession, merchantReference: String? = nil) {
        self.init(
            purchaseCountry: session.purchaseCountry, purchaseCurrency: session.purchaseCurrency,
            locale: session.locale, orderAmount: session.orderAmount, orderTaxAmount: session.orderTaxAmount,
            orderLines: session.orderLines, billingAddress: session.billingAddress,
            shippingAddress: session.shippingAddress, customer: session.customer,
            merchantReference1: merchantReference ?? session.merchantReference1,
            merchantReference2: session.merchantReference2, merchantData: session.merchantData,
            merchantURLs: session.merchantURLs
        )
    }

    enum CodingKeys: String, CodingKey {
        case purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale
        case orderAmount = "order_amount", orderTaxAmount = "order_tax_amount", orderLines = "order_lines"
        case billingAddress = "billing_address", shippingAddress = "shipping_address", customer
        case merchantReference1 = "merchant_reference1", merchantReference2 = "merchant_reference2"
        case merchantData = "merchant_data", merchantURLs = "merchant_urls", autoCapture = "auto_capture"
    }
}

public struct CreateOrderResponse: Codable, Hashable, Sendable {
    public var orderID: String
    public var fraudStatus: FraudStatus
    public var redirectURL: String?
    /// A string in Klarna's doc example, an object in its spec: kept as received.
    public var authorizedPaymentMethod: JSONValue?

    public init(orderID: String, fraudStatus: FraudStatus, redirectURL: String? = nil, authorizedPaymentMethod: JSONValue? = nil) {
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

    enum CodingKeys: String, CodingKey {
        case purchaseCountry = "purchase_country", purchaseCurrency = "purchase_currency", locale, description
        case intendedUse = "intended_use", billingAddress = "billing_address", customer
    }
}

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
