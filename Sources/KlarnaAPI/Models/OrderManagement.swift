import Foundation

/// `GET /ordermanagement/v1/orders/{id}` (MerchantOrderDto), the fields the daemon acts on.
public struct Order: Codable, Hashable, Sendable {
    public var orderID: String
    public var status: OrderStatus
    public var fraudStatus: FraudStatus
    public var orderAmount: Int
    public var originalOrderAmount: Int?
    public var capturedAmount: Int
    public var refundedAmount: Int?
    public var remainingAuthorizedAmount: Int
    public var purchaseCurrency: String?
    /// "The order can only be captured until this time."
    public var expiresAt: Date?
    public var createdAt: Date?
    public var klarnaReference: String?
    public var merchantReference1: String?
    public var captures: [Capture]
    /// Refunds on the order, by the daemon or by anyone else (the Merchant Portal); absent reads as none.
    public var refunds: [Refund]

    public init(
        orderID: String, status: OrderStatus, fraudStatus: FraudStatus, orderAmount: Int,
        originalOrderAmount: Int? = nil, capturedAmount: Int, refundedAmount: Int? = nil,
        remainingAuthorizedAmount: Int, purchaseCurrency: String? = nil, expiresAt: Date? = nil,
        createdAt: Date? = nil, klarnaReference: String? = nil, merchantReference1: String? = nil,
        captures: [Capture] = [], refunds: [Refund] = []
    ) {
        self.orderID = orderID
        self.status = status
        self.fraudStatus = fraudStatus
        self.orderAmount = orderAmount
        self.originalOrderAmount = originalOrderAmount
        self.capturedAmount = capturedAmount
        self.refundedAmount = refundedAmount
        self.remainingAuthorizedAmount = remainingAuthorizedAmount
        self.purchaseCurrency = purchaseCurrency
        self.expiresAt = expiresAt
        self.createdAt = createdAt
        self.klarnaReference = klarnaReference
        self.merchantReference1 = merchantReference1
        self.captures = captures
        self.refunds = refunds
    }

    enum CodingKeys: String, CodingKey {
        case orderID = "order_id", status, fraudStatus = "fraud_status", orderAmount = "order_amount"
        case originalOrderAmount = "original_order_amount", capturedAmount = "captured_amount"
        case refundedAmount = "refunded_amount", remainingAuthorizedAmount = "remaining_authorized_amount"
        case purchaseCurrency = "purchase_currency", expiresAt = "expires_at", createdAt = "created_at"
        case klarnaReference = "klarna_reference", merchantReference1 = "merchant_reference1", captures, refunds
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        orderID = try c.decode(String.self, forKey: .orderID)
        status = try c.decode(OrderStatus.self, forKey: .status)
        fraudStatus = try c.decode(FraudStatus.self, forKey: .fraudStatus)
        orderAmount = try c.decode(Int.self, forKey: .orderAmount)
        originalOrderAmount = try c.decodeIfPresent(Int.self, forKey: .originalOrderAmount)
        capturedAmount = try c.decodeIfPresent(Int.self, forKey: .capturedAmount) ?? 0
        refundedAmount = try c.decodeIfPresent(Int.self, forKey: .refundedAmount)
        remainingAuthorizedAmount = try c.decode(Int.self, forKey: .remainingAuthorizedAmount)
        purchaseCurrency = try c.decodeIfPresent(String.self, forKey: .purchaseCurrency)
        expiresAt = try c.decodeIfPresent(Date.self, forKey: .expiresAt)
        createdAt = try c.decodeIfPresent(Date.self, forKey: .createdAt)
        klarnaReference = try c.decodeIfPresent(String.self, forKey: .klarnaReference)
        merchantReference1 = try c.decodeIfPresent(String.self, forKey: .merchantReference1)
        captures = try c.decodeIfPresent([Capture].self, forKey: .captures) ?? []
        refunds = try c.decodeIfPresent([Refund].self, forKey: .refunds) ?? []
    }
}

public struct Capture: Codable, Hashable, Sendable {
    public var captureID: String
    public var capturedAmount: Int
    public var capturedAt: Date?
    public var reference: String?

    public init(captureID: String, capturedAmount: Int, capturedAt: Date? = nil, reference: String? = nil) {
        self.captureID = captureID
        self.capturedAmount = capturedAmount
        self.capturedAt = capturedAt
        self.reference = reference
    }

    enum CodingKeys: String, CodingKey {
        case captureID = "capture_id", capturedAmount = "captured_amount", capturedAt = "captured_at", reference
    }
}

/// One of an order's `refunds[]`. Klarna's schema requires none of its fields, so each may be absent; a refund
/// without an amount tells nothing.
public struct Refund: Codable, Hashable, Sendable {
    public var refundID: String?
    public var refundedAmount: Int?
    public var refundedAt: Date?
    public var reference: String?

    public init(refundID: String?, refundedAmount: Int?, refundedAt: Date? = nil, reference: String? = nil) {
        self.refundID = refundID
        self.refundedAmount = refundedAmount
        self.refundedAt = refundedAt
        self.reference = reference
    }

    enum CodingKeys: String, CodingKey {
        case refundID = "refund_id", refundedAmount = "refunded_amount", refundedAt = "refunded_at", reference
    }
}

/// `POST /ordermanagement/v1/orders/{id}/captures` body.
public struct CaptureRequest: Codable, Hashable, Sendable {
    public var capturedAmount: Int
    public var description: String?
    public var reference: String?
    public var orderLines: [OrderLine]?

    public init(capturedAmount: Int, description: String? = nil, reference: String? = nil, orderLines: [OrderLine]? = nil) {
        self.capturedAmount = capturedAmount
        self.description = description
        self.reference = reference
        self.orderLines = orderLines
    }

    enum CodingKeys: String, CodingKey {
        case capturedAmount = "captured_amount", description, reference, orderLines = "order_lines"
    }
}

/// A created capture: Klarna answers `201` with `Capture-Id` and `Location` headers and no body.
public struct CaptureCreated: Hashable, Sendable {
    public var captureID: String
    public var location: String?

    public init(captureID: String, location: String?) {
        self.captureID = captureID
        self.location = location
    }
}
